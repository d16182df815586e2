"""Each call's envelope: the key from ``authorization`` metadata as the HTTP check reads the
header, the model from ``x-model`` (else the default), the gRPC deadline as the request's,
errors aborted with their status, and every call counted with its code."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from embedgate.api.errors import Overloaded
from embedgate.api.grpc.calls import Calls
from embedgate.api.http.auth import KeyRing
from embedgate.api.settings import Settings
from embedgate.api.telemetry.metrics import REGISTRY


class Aborted(Exception):
    pass


class Context:
    """What a method's context says of its call, and how it was aborted."""

    def __init__(self, metadata=(), remaining: float | None = None):
        self.metadata = tuple(metadata)
        self.remaining = remaining
        self.aborted: tuple | None = None

    def invocation_metadata(self):
        return self.metadata

    def time_remaining(self):
        return self.remaining

    async def abort(self, code, details="", trailing_metadata=()):
        self.aborted = (code, details, dict(trailing_metadata))
        raise Aborted(code)


class Tei:
    def model_named(self, key):
        return f"named {key}"

    def default_model(self):
        return "the default model"


SETTINGS = Settings(request_timeout_s=30, max_request_timeout_s=60)


def calls(*keys: str) -> Calls:
    return Calls(Tei(), KeyRing(list(keys), []), SETTINGS)


def counted(method: str, code: str) -> float:
    labels = {"method": method, "model": "", "code": code}
    return REGISTRY.get_sample_value("embedgate_grpc_requests_total", labels) or 0


async def test_the_model_is_the_named_one_else_the_default():
    async with calls().call(Context([("x-model", "org/m")]), "/t/named") as call:
        assert call.model() == "named org/m"
    async with calls().call(Context(), "/t/named") as call:
        assert call.model() == "the default model"


@pytest.mark.parametrize(("remaining", "timeout_s"), [(None, 30), (2.5, 2.5), (600, 60)])
async def test_the_deadline_is_the_calls_within_the_servers_bounds(remaining, timeout_s):
    async with calls().call(Context(remaining=remaining), "/t/deadline") as call:
        assert call.timeout_s() == pytest.approx(timeout_s)


async def test_a_deadline_already_past_is_deadline_exceeded():
    context = Context(remaining=-0.1)
    with pytest.raises(Aborted):
        async with calls().call(context, "/t/late"):
            raise AssertionError("not answered")
    assert context.aborted[0] == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.parametrize(("metadata", "allowed"), [
    ((), False), ((("authorization", "Bearer wrong"),), False), ((("authorization", "Bearer k1"),), True),
    ((("authorization", "bearer k1"),), True), ((("authorization", "k1"),), False),
])
async def test_keys_are_checked_as_the_http_header_is(metadata, allowed):
    context = Context(metadata)
    before = counted("/t/keys", "UNAUTHENTICATED")
    try:
        async with calls("k1").call(context, "/t/keys"):
            pass
    except Aborted:
        pass
    assert (context.aborted is None) == allowed
    if not allowed:
        assert context.aborted[0] == grpc.StatusCode.UNAUTHENTICATED
        assert counted("/t/keys", "UNAUTHENTICATED") == before + 1


async def test_an_error_is_aborted_with_its_status_and_counted():
    context = Context()
    before = counted("/t/error", "RESOURCE_EXHAUSTED")
    with pytest.raises(Aborted):
        async with calls().call(context, "/t/error"):
            raise Overloaded("at its limit")
    assert context.aborted == (grpc.StatusCode.RESOURCE_EXHAUSTED, "at its limit",
                               {"error_type": "Overloaded", "retry-after": "1"})
    assert counted("/t/error", "RESOURCE_EXHAUSTED") == before + 1


async def test_a_cancelled_call_is_counted_as_cancelled():
    before = counted("/t/cancel", "CANCELLED")

    async def method():
        async with calls().call(Context(), "/t/cancel"):
            await asyncio.sleep(60)

    task = asyncio.ensure_future(method())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert counted("/t/cancel", "CANCELLED") == before + 1


def key_sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0


async def test_a_call_with_a_key_counts_in_the_keys_metrics_as_its_http_request_would():
    keys = calls("k-metrics")
    label = keys.keyring.check("Bearer k-metrics", admin=False).label
    authorized = [("authorization", "Bearer k-metrics")]
    answered = key_sample("embedgate_key_requests_total", key=label, status="200")
    # TEI's HTTP route answers an overload 429 (where the native routes answer 503).
    refused = key_sample("embedgate_key_requests_total", key=label, status="429")
    overloaded = key_sample("embedgate_key_rejections_total", key=label, reason="overloaded")
    async with keys.call(Context(authorized), "/t/key"):
        pass
    with pytest.raises(Aborted):
        async with keys.call(Context(authorized), "/t/key"):
            raise Overloaded("at its limit")
    assert key_sample("embedgate_key_requests_total", key=label, status="200") == answered + 1
    assert key_sample("embedgate_key_requests_total", key=label, status="429") == refused + 1
    assert key_sample("embedgate_key_rejections_total", key=label, reason="overloaded") == overloaded + 1
