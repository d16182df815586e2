"""One error shape for every endpoint, and the one place exceptions become statuses.

Every error a client sees is ``{"error": {"status": int, "code": str, "message": str}}``,
except on the OpenAI-compatible routes (``/v1/*``), which answer in OpenAI's error shape
(``api/openai/errors.py``) with the same codes.
Internal exceptions are logged with their traceback and answered with a generic 500 that
carries a request id, never the traceback.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from .openai.errors import is_openai_path, openai_error
from .responses import JSONResponse
from .telemetry import note_error

log = logging.getLogger("embedgate.errors")


class ApiError(Exception):
    """An error with a status, a stable machine code and a message for the client."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


class BadRequest(ApiError):
    status, code = 400, "bad_request"


class InvalidModelName(ApiError):
    status, code = 422, "invalid_model_name"


class ModelNotFound(ApiError):
    status, code = 404, "model_not_found"


class ModelNotLoaded(ApiError):
    status, code = 409, "model_not_loaded"


class TooManyInputs(ApiError):
    status, code = 413, "too_many_inputs"


class ConversionFailed(ApiError):
    status, code = 422, "conversion_failed"


class Overloaded(ApiError):
    status, code = 503, "overloaded"

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})


class TritonUnavailable(ApiError):
    status, code = 503, "triton_unavailable"

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})


class TritonConnectionLost(TritonUnavailable):
    """The connection to Triton broke: the process is gone (or going)."""


class TritonError(ApiError):
    status, code = 502, "triton_error"


class DeadlineExceeded(ApiError):
    status, code = 504, "deadline_exceeded"


class InvalidImage(ApiError):
    """One image of a request cannot be used. The code says why: ``image_url_refused``
    (scheme, or an address the fetcher may not reach), ``image_fetch_failed``,
    ``image_too_large`` or ``invalid_image``; the message names the image."""

    status = 400

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "code": code, "message": message}}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(status, code, message), status_code=status, headers=headers)


def _describe_validation(exc: RequestValidationError) -> tuple[int, str, str]:
    errors = exc.errors()
    if any(err.get("type") == "json_invalid" for err in errors):
        return 400, "malformed_json", "request body is not valid JSON"
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return 422, "invalid_request", "; ".join(parts) + more


def _first_field(exc: RequestValidationError) -> str | None:
    """The parameter the first validation error is about (OpenAI's ``param``)."""
    for err in exc.errors()[:1]:
        if err.get("type") == "json_invalid":  # its location is a character offset
            return None
        return ".".join(str(p) for p in err.get("loc", ()) if p != "body") or None
    return None


def error_response_for(
    path: str,
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    param: str | None = None,
) -> JSONResponse:
    """Every error leaves through here: OpenAI's shape on the OpenAI-compatible routes,
    the project's everywhere else (middleware that answers before the routes uses it too)."""
    note_error(code)
    if is_openai_path(path):
        status, body = openai_error(status, code, message, param)
        return JSONResponse(body, status_code=status, headers=headers)
    return error_response(status, code, message, headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        param = getattr(exc, "param", None)
        return error_response_for(request.scope["path"], exc.status, exc.code, exc.message, exc.headers, param)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, code, message = _describe_validation(exc)
        return error_response_for(request.scope["path"], status, code, message, param=_first_field(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        path = request.scope["path"]
        if exc.status_code == 400:
            # FastAPI's own parse failure (e.g. bytes that are not UTF-8).
            return error_response_for(path, 400, "malformed_body", "request body could not be parsed as UTF-8 JSON")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response_for(path, exc.status_code, code, str(exc.detail), exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = uuid.uuid4().hex[:12]
        log.exception("unhandled error on %s %s [%s]", request.method, request.url.path, request_id)
        message = f"internal error (request id {request_id})"
        return error_response_for(request.scope["path"], 500, "internal_error", message)
