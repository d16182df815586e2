"""The load generator against a small stand-in server on 127.0.0.1."""

import asyncio
import contextlib
import time

import aiohttp
import pytest
from aiohttp import web

from api.benchmark.endpoints import InferEndpoint
from api.benchmark.loadgen import run_load


class NumberedPayload:
    """Request i carries one text naming i; some ask the stand-in server to misbehave."""

    kind = "text"
    per_request = 1

    def inputs(self, index: int) -> list[str]:
        if index % 5 == 3:
            return ["fail"]
        if index == 7:
            return ["wrong count"]
        return [f"request {index}"]


class StandIn:
    def __init__(self):
        self.inflight = 0
        self.most_inflight = 0
        self.seen: list[str] = []

    async def infer(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.inflight += 1
        self.most_inflight = max(self.most_inflight, self.inflight)
        try:
            await asyncio.sleep(0.05)
        finally:
            self.inflight -= 1
        (text,) = body["text"]
        self.seen.append(text)
        if text == "fail":
            return web.json_response({"error": {"status": 503}}, status=503)
        vectors = [[1.0, 0.0]] * (2 if text == "wrong count" else 1)
        return web.json_response(
            {"text_embeddings": vectors, "processingTimeMs": 3.0}, headers={"x-tokenize-time-ms": "0.5"}
        )


@contextlib.asynccontextmanager
async def stand_in():
    # A context manager rather than a fixture: async fixtures run on the session's loop,
    # and the server must run on the test's own.
    server = StandIn()
    app = web.Application()
    app.router.add_post("/infer", server.infer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_fixed_number_of_requests_with_bounded_concurrency():
    async with stand_in() as (server, url), aiohttp.ClientSession() as session:
        run = await run_load(session, url, InferEndpoint("m"), NumberedPayload(), concurrency=4, requests=20, first_index=100)
    assert [r.index for r in run.records] == list(range(100, 120))
    assert len(server.seen) == 20
    assert server.most_inflight == 4
    statuses = [r.status for r in run.records]
    assert statuses.count("503") == 4 and statuses.count("200") == 16
    ok = run.succeeded[0]
    assert ok.embeddings == 1 and ok.server_ms == 3.0 and ok.timings_ms == {"tokenize": 0.5}
    assert ok.latency_s >= 0.05
    assert run.wall_s >= 5 * 0.05  # 20 requests, 4 at a time, 50 ms each


async def test_a_response_with_the_wrong_number_of_embeddings_is_not_a_success():
    async with stand_in() as (_, url), aiohttp.ClientSession() as session:
        run = await run_load(session, url, InferEndpoint("m"), NumberedPayload(), concurrency=2, requests=10)
    assert run.records[7].status == "bad_response"


async def test_a_duration_run_stops_sending_at_the_deadline():
    started = time.perf_counter()
    async with stand_in() as (server, url), aiohttp.ClientSession() as session:
        run = await run_load(session, url, InferEndpoint("m"), NumberedPayload(), concurrency=3, duration_s=0.3)
    assert time.perf_counter() - started < 5
    assert len(run.records) == len(server.seen) > 3
    assert [r.index for r in run.records] == list(range(len(run.records)))


async def test_an_unreachable_server_is_counted_not_raised():
    async with aiohttp.ClientSession() as session:
        run = await run_load(session, "http://127.0.0.1:9", InferEndpoint("m"), NumberedPayload(), concurrency=2, requests=4)
    assert {r.status for r in run.records} == {"connection_error"}
    assert run.succeeded == []


async def test_exactly_one_of_requests_and_duration():
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ValueError):
            await run_load(session, "http://x", InferEndpoint("m"), NumberedPayload(), concurrency=1)
