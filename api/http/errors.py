"""One error shape for every endpoint: domain errors answered with their status
(``endpoints/statuses.py``, the one table) in the shape of the route's API.

Every error a client sees is ``{"error": {"status": int, "code": str, "message": str}}``,
except on the OpenAI-compatible routes (``/v1/*``), which answer in OpenAI's error shape
(``endpoints/statuses.py``) with the same codes, and on TEI's (``/tei``, ``/tei/*``), which
answer in TEI's shape and statuses (``http/tei/errors.py``).
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
from starlette.routing import Match

from ..endpoints.statuses import describe_validation, first_field, headers_of, openai_error, status_of
from ..errors import EmbedgateError
from ..telemetry import note_error
from .openai.errors import is_openai_path
from .responses import JSONResponse
from .tei.errors import is_tei_path, tei_error

log = logging.getLogger("embedgate.errors")


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "code": code, "message": message}}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(status, code, message), status_code=status, headers=headers)


def error_response_for(
    path: str,
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    param: str | None = None,
) -> JSONResponse:
    """Every error leaves through here: OpenAI's shape on the OpenAI-compatible routes, TEI's
    on TEI's, the project's everywhere else (middleware that answers before the routes uses it too)."""
    note_error(code)
    if is_openai_path(path):
        status, body = openai_error(status, code, message, param)
        return JSONResponse(body, status_code=status, headers=headers)
    if is_tei_path(path):
        status, body = tei_error(status, code, message)
        return JSONResponse(body, status_code=status, headers=headers)
    return error_response(status, code, message, headers)


def _routes(routes):
    """Every route, those of included routers too."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _routes(included.routes)
        else:
            yield route


def _methods_of(request: Request) -> list[str]:
    """Every method some route of the request's path takes."""
    methods: set[str] = set()
    for route in _routes(request.app.router.routes):
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


def domain_error_response(path: str, exc: EmbedgateError) -> JSONResponse:
    """A domain error's answer: its status, headers and code, in the shape of ``path``'s API."""
    return error_response_for(path, status_of(exc), exc.code, exc.message, headers_of(exc), getattr(exc, "param", None))


def unexpected_error_response(method: str, path: str, exc: Exception) -> JSONResponse:
    """An internal error's answer: logged with its traceback, answered with a request id only."""
    request_id = uuid.uuid4().hex[:12]
    log.error("unhandled error on %s %s [%s]", method, path, request_id, exc_info=exc)
    return error_response_for(path, 500, "internal_error", f"internal error (request id {request_id})")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(EmbedgateError)
    async def _domain_error(request: Request, exc: EmbedgateError) -> JSONResponse:
        return domain_error_response(request.scope["path"], exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, code, message = describe_validation(exc)
        return error_response_for(request.scope["path"], status, code, message, param=first_field(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        path = request.scope["path"]
        if exc.status_code == 400:
            # FastAPI's own parse failure (e.g. bytes that are not UTF-8).
            return error_response_for(path, 400, "malformed_body", "request body could not be parsed as UTF-8 JSON")
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = exc.headers
        if exc.status_code == 405:
            # Starlette names the methods of the first route of the path only; a path may have several.
            methods = _methods_of(request)
            if methods:
                headers = {**(headers or {}), "Allow": ", ".join(methods)}
        return error_response_for(path, exc.status_code, code, str(exc.detail), headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return unexpected_error_response(request.method, request.url.path, exc)
