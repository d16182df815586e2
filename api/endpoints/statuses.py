"""The one place a domain error becomes a status: what every HTTP answer and every batch
job's line takes, and the error bodies a line carries (OpenAI's shape, as on every
``/v1/`` route). ``api/http/errors.py`` puts them in HTTP answers; nothing else knows
statuses.
"""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from .. import errors
from ..errors import EmbedgateError
from .rate_limits import rate_limit_headers

# The one table from domain errors to HTTP statuses; a subclass not listed takes its
# nearest listed ancestor's status.
STATUS: dict[type[EmbedgateError], int] = {
    EmbedgateError: 500,
    errors.InvalidInput: 400,
    errors.InvalidImage: 400,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    errors.ModelNotFound: 404,
    errors.FileNotFound: 404,
    errors.BatchNotFound: 404,
    errors.BatchStateConflict: 409,
    errors.ModelNotLoaded: 409,
    errors.ModelConflict: 409,
    errors.TooManyInputs: 413,
    errors.BodyTooLarge: 413,
    errors.NotAcceptable: 406,
    errors.UnsupportedMediaType: 415,
    errors.InvalidModelName: 422,
    errors.ConversionFailed: 422,
    errors.TritonError: 502,
    errors.ReplicaLoadFailed: 502,
    errors.ClusterConfigError: 502,
    errors.RateLimited: 429,
    errors.Overloaded: 503,
    errors.NotReady: 503,
    errors.TritonUnavailable: 503,
    errors.RepositoryUnavailable: 503,
    errors.PrimaryUnavailable: 503,
    errors.DeadlineExceeded: 504,
    errors.HubUnavailable: 502,
    errors.HubTimeout: 504,
    errors.InsufficientStorage: 507,
    errors.MemoryBudgetExceeded: 507,
}


def status_of(error: EmbedgateError) -> int:
    for cls in type(error).__mro__:
        status = STATUS.get(cls)
        if status is not None:
            return status
    return 500


def headers_of(error: EmbedgateError) -> dict[str, str]:
    headers = {}
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(error.retry_after_s)
    if isinstance(error, errors.Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(error, errors.RateLimited):
        headers.update(rate_limit_headers(error.standing))  # type: ignore[arg-type]
    return headers


def describe_validation(exc: RequestValidationError | ValidationError) -> tuple[int, str, str]:
    errors = exc.errors()
    if any(err.get("type") == "json_invalid" for err in errors):
        return 400, "malformed_json", "request body is not valid JSON"
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return 422, "invalid_request", "; ".join(parts) + more


def first_field(exc: RequestValidationError | ValidationError) -> str | None:
    """The parameter the first validation error is about (OpenAI's ``param``)."""
    for err in exc.errors()[:1]:
        if err.get("type") == "json_invalid":  # its location is a character offset
            return None
        return ".".join(str(p) for p in err.get("loc", ()) if p != "body") or None
    return None


def openai_error(status: int, code: str, message: str, param: str | None = None) -> tuple[int, dict[str, Any]]:
    """The status and body OpenAI would send for this error."""
    # OpenAI answers invalid parameters with 400, never 422, and its clients pick their
    # exception class by status (422 would surface as an unexpected error type).
    if status == 422:
        status = 400
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}


def openai_error_of(exc: EmbedgateError | ValidationError) -> tuple[int, dict[str, Any]]:
    """The status and OpenAI-shaped body a ``/v1/`` route would answer ``exc`` with (for a
    batch job's lines, answered without a route)."""
    if isinstance(exc, ValidationError):
        status, code, message = describe_validation(exc)
        return openai_error(status, code, message, first_field(exc))
    return openai_error(status_of(exc), exc.code, exc.message, getattr(exc, "param", None))
