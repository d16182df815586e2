"""The benchmark's gRPC load (``--endpoint grpc`` and ``grpc-stream``) against a TEI Embed
service of the test's own: every input of a request is one message, the answers counted,
a refusal recorded as the HTTP status of the same refusal."""

from __future__ import annotations

import contextlib

import grpc
import pytest

from embedgate.api.grpc.stubs import tei_pb2 as pb
from embedgate.api.grpc.stubs import tei_pb2_grpc
from embedgate.bench.grpc_endpoints import build_grpc_endpoint
from embedgate.bench.loadgen import run_load
from embedgate.bench.payloads import SentencePayload


class Embed(tei_pb2_grpc.EmbedServicer):
    """Answers each text with its length; refuses the texts past ``refuse_after`` calls."""

    def __init__(self, refuse_after: int | None = None):
        self.calls = 0
        self.metadata: list[dict] = []
        self.refuse_after = refuse_after

    async def _answer(self, request, context):
        self.calls += 1
        if self.refuse_after is not None and self.calls > self.refuse_after:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "overloaded")
        return pb.EmbedResponse(embeddings=[float(len(request.inputs)), 1.0],
                                metadata=pb.Metadata(total_time_ns=2_500_000))

    async def Embed(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        return await self._answer(request, context)

    async def EmbedStream(self, requests, context):
        self.metadata.append(dict(context.invocation_metadata()))
        async for request in requests:
            yield await self._answer(request, context)


@contextlib.asynccontextmanager
async def serving(servicer: Embed):
    """The servicer on a port of its own. A context manager rather than a fixture: async
    fixtures run on the session's loop, a test on its own."""
    server = grpc.aio.server()
    tei_pb2_grpc.add_EmbedServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(0)


@pytest.mark.parametrize("name", ["grpc", "grpc-stream"])
async def test_each_request_is_its_inputs_as_messages(name):
    servicer = Embed()
    async with serving(servicer) as port:
        endpoint = build_grpc_endpoint(name, "127.0.0.1", port, "org/m", "k1")
        run = await run_load(None, endpoint, SentencePayload(per_request=4), concurrency=3, timeout_s=10, requests=9)
    assert [record.status for record in run.records] == ["200"] * 9
    assert all(record.embeddings == 4 and record.server_ms == 2.5 for record in run.records)
    assert servicer.calls == 36
    # One call per message, or one stream per client.
    assert len(servicer.metadata) == (36 if name == "grpc" else 3)
    assert all(m["x-model"] == "org/m" and m["authorization"] == "Bearer k1" for m in servicer.metadata)


@pytest.mark.parametrize("name", ["grpc", "grpc-stream"])
async def test_a_refusal_is_recorded_as_its_http_status(name):
    async with serving(Embed(refuse_after=4)) as port:
        endpoint = build_grpc_endpoint(name, "127.0.0.1", port, "org/m", None)
        run = await run_load(None, endpoint, SentencePayload(per_request=2), concurrency=1, timeout_s=10, requests=4)
    assert [record.status for record in run.records][:2] == ["200", "200"]
    assert "429" in [record.status for record in run.records][2:]
