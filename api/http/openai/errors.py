"""OpenAI's error shape, used on the OpenAI-compatible routes (``/v1/*``) only.

``api.errors`` calls :func:`openai_error` for those paths, so every error there (validation,
unknown model, overload, internal) has OpenAI's shape while every other route keeps the
project's. The ``code`` field carries the project's stable error code.
"""

from __future__ import annotations

from typing import Any

PREFIX = "/v1/"


def is_openai_path(path: str) -> bool:
    return path.startswith(PREFIX)


def openai_error(status: int, code: str, message: str, param: str | None = None) -> tuple[int, dict[str, Any]]:
    """The status and body OpenAI would send for this error."""
    # OpenAI answers invalid parameters with 400, never 422, and its clients pick their
    # exception class by status (422 would surface as an unexpected error type).
    if status == 422:
        status = 400
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}
