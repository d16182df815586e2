"""Triton's failures, as a client of the gateway sees them."""

import asyncio

import aiohttp
import pytest
from tritonclient.utils import InferenceServerException

from embedgate.api.endpoints.statuses import headers_of, status_of
from embedgate.api.errors import (
    DeadlineExceeded,
    ModelProcessLost,
    Overloaded,
    TritonError,
    TritonUnavailable,
)
from embedgate.api.triton.client import map_triton_error


@pytest.mark.parametrize(
    "message, status, expected",
    [
        # Triton's queue policy: max_queue_size reached, and a queued request past its timeout.
        ("Exceeds maximum queue size", "503", Overloaded),
        ("Request timeout expired", "503", DeadlineExceeded),
        ("Request for unknown model: 'm' is not found", "400", TritonUnavailable),
        ("Request for unknown model: 'm' has no available versions", "400", TritonUnavailable),
        ("onnxruntime failed: shape mismatch", "500", TritonError),
        # The model's stub died under the request: the model is loaded again, the request sent again.
        ("Stub process 'm_0_0' is not healthy.", "500", ModelProcessLost),
    ],
)
def test_triton_messages_map_to_statuses(message, status, expected):
    error = map_triton_error(InferenceServerException(msg=message, status=status), "m")
    assert isinstance(error, expected)
    if expected is ModelProcessLost:
        assert error.part == "m"
    assert "onnxruntime" not in error.message, "internal details must not reach clients"


def test_overload_answers_carry_retry_after():
    error = map_triton_error(InferenceServerException(msg="Exceeds maximum queue size", status="503"), "m")
    assert status_of(error) == 503 and headers_of(error)["Retry-After"]


@pytest.mark.parametrize(
    "exc, expected",
    [
        (aiohttp.ClientConnectionError(), TritonUnavailable),
        (ConnectionRefusedError(), TritonUnavailable),
        (asyncio.TimeoutError(), DeadlineExceeded),
    ],
)
def test_transport_failures(exc, expected):
    assert isinstance(map_triton_error(exc, "m"), expected)
