"""One error shape for every endpoint, and the one place exceptions become statuses.

Every error a client sees is ``{"error": {"status": int, "code": str, "message": str}}``.
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

from .responses import JSONResponse

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


class TritonError(ApiError):
    status, code = 502, "triton_error"


class DeadlineExceeded(ApiError):
    status, code = 504, "deadline_exceeded"


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


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(*_describe_validation(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = uuid.uuid4().hex[:12]
        log.exception("unhandled error on %s %s [%s]", request.method, request.url.path, request_id)
        return error_response(500, "internal_error", f"internal error (request id {request_id})")
