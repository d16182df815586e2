"""The one place an error becomes a gRPC status on TEI's gRPC API, as TEI maps its errors
(``router/src/grpc/server.rs``): the HTTP answer TEI's routes would give
(``http/tei/errors.py``: TEI's type and status) read as a status code.

TEI's six error types each take one code: ``Validation`` and ``Empty`` ``INVALID_ARGUMENT``,
``Overloaded`` ``RESOURCE_EXHAUSTED``, ``Unhealthy`` ``UNAVAILABLE``, ``Backend`` and
``Tokenizer`` ``FAILED_PRECONDITION`` (TEI's answer to a request the model's kind does not
answer, as to a failed inference). The project's errors that TEI does not have keep the
meaning of their HTTP status: a missing or invalid key ``UNAUTHENTICATED``, a key that may
not ``PERMISSION_DENIED``, an unknown model ``NOT_FOUND``, one in the repository but not
loaded ``FAILED_PRECONDITION``, a deadline ``DEADLINE_EXCEEDED``, an internal error
``INTERNAL``. The message is the one the HTTP route's body carries; the trailing metadata
carries TEI's ``error_type`` beside it, and ``retry-after`` where the HTTP answer would.
"""

from __future__ import annotations

import logging
import uuid

import grpc
from pydantic import ValidationError

from ..endpoints.statuses import describe_validation, headers_of, status_of
from ..errors import EmbedgateError
from ..http.tei.errors import tei_error

log = logging.getLogger("embedgate.grpc")

# TEI's error types, as TEI's gRPC server answers them.
CODE_OF_TYPE: dict[str, grpc.StatusCode] = {
    "Validation": grpc.StatusCode.INVALID_ARGUMENT,
    "Empty": grpc.StatusCode.INVALID_ARGUMENT,
    "Overloaded": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "Unhealthy": grpc.StatusCode.UNAVAILABLE,
    "Backend": grpc.StatusCode.FAILED_PRECONDITION,
    "Tokenizer": grpc.StatusCode.FAILED_PRECONDITION,
}
# Statuses whose meaning gRPC has a code of its own for (TEI has no such errors).
CODE_OF_STATUS: dict[int, grpc.StatusCode] = {
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.FAILED_PRECONDITION,
    500: grpc.StatusCode.INTERNAL,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}

Metadata = tuple[tuple[str, str], ...]


class RpcError(Exception):
    """An error answered as a gRPC status: its code, message and trailing metadata; and, for
    the key's metrics, the HTTP status and error code TEI's HTTP route answers it with."""

    def __init__(
        self, code: grpc.StatusCode, message: str, trailers: Metadata = (), *, status: int = 500, error_code: str = ""
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.trailers = trailers
        self.status = status
        self.error_code = error_code


def status_code(status: int, error_type: str) -> grpc.StatusCode:
    """The code of an HTTP answer in TEI's terms (its status and TEI's error type)."""
    return CODE_OF_STATUS.get(status) or CODE_OF_TYPE[error_type]


def tei_status(status: int, code: str, message: str, retry_after: str | None = None) -> RpcError:
    """The gRPC status TEI's gRPC server would answer the HTTP error (``status``, ``code``) with."""
    status, body = tei_error(status, code, message)
    trailers = (("error_type", body["error_type"]),)
    if retry_after is not None:
        trailers += (("retry-after", retry_after),)
    return RpcError(status_code(status, body["error_type"]), body["error"], trailers, status=status, error_code=code)


def rpc_error_of(error: BaseException) -> RpcError:
    """Any error a method raised, as the status it is answered with (an internal one logged,
    its message a request id only, as the HTTP routes answer it)."""
    if isinstance(error, RpcError):
        return error
    if isinstance(error, EmbedgateError):
        return tei_status(status_of(error), error.code, error.message, headers_of(error).get("Retry-After"))
    if isinstance(error, ValidationError):
        return tei_status(*describe_validation(error))
    request_id = uuid.uuid4().hex[:12]
    log.error("unhandled error in a gRPC method [%s]", request_id, exc_info=error)
    return tei_status(500, "internal_error", f"internal error (request id {request_id})")
