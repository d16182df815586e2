"""What the OpenAPI document says beyond what FastAPI derives from the routes.

- :func:`errors`: a route's error answers, with their body (the project's error shape, or
  OpenAI's on ``/v1/*``, or TEI's on ``/tei``) and headers (``Retry-After`` on a 429 and a 503, OpenAI's
  ``x-ratelimit-*`` on a 429, ``WWW-Authenticate`` on a 401). Routes list the statuses
  they can answer; the statuses themselves come from ``endpoints/statuses.py``'s STATUS.
- :class:`DocumentedApp`: the document of one running server. Bounds that are settings (how many
  texts or images one request may carry, the longest deadline a client may ask for) are
  written in from its settings, so the document states what this server enforces; the
  OpenAI-compatible routes lose FastAPI's default 422 (they answer 400 instead).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from ..endpoints.schemas.errors import ErrorResponse
from ..endpoints.schemas.fields import FROM_SETTINGS
from ..endpoints.schemas.openai import OpenAIErrorResponse
from ..endpoints.schemas.tei import TeiErrorResponse
from ..settings import Settings
from .openai.errors import is_openai_path
from .tei.errors import TEI_WHY

_WHY = {
    400: "Malformed request: a body that does not parse, or a value the server cannot use.",
    401: "No API key, or an invalid one (the server has keys).",
    403: "Not allowed: an API key where an admin key is needed, trust_remote_code or a path the server refuses, "
    "a download from the hub where downloads are off, or a gated model the server's HF_TOKEN cannot open.",
    404: "The model (or a checkpoint or directory the request names) is not there.",
    406: "Accept names only binary forms and the answer is not one array (texts and images together).",
    409: "The model is in the repository but not loaded, or the repository holds something else under its name.",
    413: "The body is over the size limit, or carries more inputs than one request may.",
    415: "The body is not in the content type the route reads.",
    422: "A field is invalid (invalid_request), or the model name is (invalid_model_name).",
    429: "The key is past its per-minute limit (rate_limited): try again after Retry-After seconds.",
    500: "Internal error; the message carries a request id to find it in the log.",
    502: "Triton failed the request, or the hub failed a load's download (hub_unavailable).",
    503: "Starting, overloaded, or Triton unavailable: try again (after Retry-After seconds when given).",
    504: "The request's deadline passed, or the hub stopped sending a load's download (hub_timeout).",
    507: "Not enough disk space to convert the model.",
}

_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds after which trying again may work.",
        "schema": {"type": "integer", "minimum": 0},
    }
}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    429: {
        **_RETRY_AFTER,
        **{
            f"x-ratelimit-{part}-{what}": {"description": f"The key's {what} per minute: {part}.",
                                           "schema": {"type": "string"}}
            for what in ("requests", "tokens")
            for part in ("limit", "remaining", "reset")
        },
    },
    503: _RETRY_AFTER,
}


def errors(
    *statuses: int, body: type[BaseModel] = ErrorResponse, why: dict[int, str] = _WHY
) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route that can answer these error statuses."""
    return {status: _error(status, body, why) for status in statuses}


def openai_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """:func:`errors` in OpenAI's shape, for the ``/v1/*`` routes."""
    return errors(*statuses, body=OpenAIErrorResponse)


def tei_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """:func:`errors` in TEI's shape and with TEI's meanings, for the ``/tei`` routes."""
    return errors(*statuses, body=TeiErrorResponse, why=TEI_WHY)


def _error(status: int, body: type[BaseModel], why: dict[int, str]) -> dict[str, Any]:
    answer: dict[str, Any] = {"model": body, "description": why[status]}
    if status in _HEADERS:
        answer["headers"] = _HEADERS[status]
    return answer


class DocumentedApp(FastAPI):
    """A FastAPI application whose document is that of the server it runs in (see the
    module's docstring), built once, on first request."""

    def __init__(self, settings: Settings, **fastapi: Any):
        super().__init__(**fastapi)
        self._settings = settings
        self._document: dict[str, Any] | None = None

    def openapi(self) -> dict[str, Any]:
        if self._document is None:
            # A copy: the generated document shares dicts with the routes (openapi_extra).
            document = copy.deepcopy(super().openapi())
            _write_settings(document, self._settings)
            _drop_default_validation_errors(document)
            self._document = document
        return self._document


def _write_settings(node: Any, settings: Settings) -> None:
    """Every ``FROM_SETTINGS`` marker becomes the keywords it names, with the settings' values."""
    if isinstance(node, dict):
        for keyword, setting in node.pop(FROM_SETTINGS, {}).items():
            node[keyword] = getattr(settings, setting)
        for value in node.values():
            _write_settings(value, settings)
    elif isinstance(node, list):
        for value in node:
            _write_settings(value, settings)


def _drop_default_validation_errors(document: dict[str, Any]) -> None:
    """FastAPI documents a 422 on every route with parameters; the OpenAI-compatible routes
    answer invalid requests with 400, as OpenAI does, and never with 422."""
    for path, operations in document.get("paths", {}).items():
        if is_openai_path(path):
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
    schemas = document.get("components", {}).get("schemas", {})
    if "#/components/schemas/HTTPValidationError" not in json.dumps(document):
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
