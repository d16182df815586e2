"""The paths that answer errors in OpenAI's shape: the OpenAI-compatible routes (``/v1/*``).

``api/http/errors.py`` answers every error there (validation, unknown model, overload,
internal) in OpenAI's shape (``endpoints/statuses.py``'s :func:`openai_error`), while every
other route keeps the project's. The ``code`` field carries the project's stable error code.
"""

from __future__ import annotations

PREFIX = "/v1/"


def is_openai_path(path: str) -> bool:
    return path.startswith(PREFIX)
