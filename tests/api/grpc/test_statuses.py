"""Errors as the gRPC status codes TEI's gRPC server answers with: TEI's six error types by
TEI's own table, the project's other errors by the meaning of their HTTP status."""

from __future__ import annotations

import grpc
import pytest
from pydantic import BaseModel, ValidationError

from embedgate.api import errors
from embedgate.api.grpc.statuses import RpcError, rpc_error_of

CODES = [
    (errors.Empty("`inputs` cannot be empty"), grpc.StatusCode.INVALID_ARGUMENT, "Empty"),
    (errors.InvalidInput("bad"), grpc.StatusCode.INVALID_ARGUMENT, "Validation"),
    (errors.TooManyInputs("batch size 9 > maximum allowed batch size 8"), grpc.StatusCode.INVALID_ARGUMENT,
     "Validation"),
    (errors.InputTooLong("too long"), grpc.StatusCode.INVALID_ARGUMENT, "Validation"),
    (errors.WrongModelKind("go to /rerank"), grpc.StatusCode.FAILED_PRECONDITION, "Backend"),
    (errors.TritonError("failed"), grpc.StatusCode.FAILED_PRECONDITION, "Backend"),
    (errors.Overloaded("full"), grpc.StatusCode.RESOURCE_EXHAUSTED, "Overloaded"),
    (errors.RateLimited("past the limit"), grpc.StatusCode.RESOURCE_EXHAUSTED, "Overloaded"),
    (errors.TritonUnavailable("restarting"), grpc.StatusCode.UNAVAILABLE, "Unhealthy"),
    (errors.NotReady("starting"), grpc.StatusCode.UNAVAILABLE, "Unhealthy"),
    (errors.ModelNotFound("no such model"), grpc.StatusCode.NOT_FOUND, "Validation"),
    (errors.NoDefaultModel("two models loaded"), grpc.StatusCode.NOT_FOUND, "Validation"),
    (errors.ModelNotLoaded("in the repository", key="m"), grpc.StatusCode.FAILED_PRECONDITION, "Validation"),
    (errors.DeadlineExceeded("too late"), grpc.StatusCode.DEADLINE_EXCEEDED, "Backend"),
    (errors.Unauthorized("missing API key"), grpc.StatusCode.UNAUTHENTICATED, "Validation"),
    (errors.Forbidden("not this key"), grpc.StatusCode.PERMISSION_DENIED, "Validation"),
]


@pytest.mark.parametrize(("error", "code", "error_type"), CODES, ids=lambda v: getattr(v, "code", None) or str(v))
def test_each_error_is_teis_status_code(error, code, error_type):
    status = rpc_error_of(error)
    assert (status.code, status.message) == (code, error.message)
    assert dict(status.trailers)["error_type"] == error_type


def test_a_refusal_to_retry_says_when():
    assert dict(rpc_error_of(errors.Overloaded("full")).trailers)["retry-after"] == "1"
    assert "retry-after" not in dict(rpc_error_of(errors.Empty("x")).trailers)


def test_a_body_refused_by_its_schema_is_invalid_argument():
    class Body(BaseModel):
        inputs: list[str]

    with pytest.raises(ValidationError) as refused:
        Body.model_validate({"inputs": 3})
    status = rpc_error_of(refused.value)
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT and status.message.startswith("inputs:")


def test_an_internal_error_is_internal_and_says_nothing_of_itself(caplog):
    status = rpc_error_of(RuntimeError("secret detail at /some/path"))
    assert status.code == grpc.StatusCode.INTERNAL
    assert "secret" not in status.message and "request id" in status.message
    assert "unhandled error" in caplog.text


def test_a_status_already_decided_is_kept():
    decided = RpcError(grpc.StatusCode.ABORTED, "as it is")
    assert rpc_error_of(decided) is decided
