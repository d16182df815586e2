"""The load generator against a small stand-in server on 127.0.0.1."""

import asyncio
import contextlib
import time

import pytest
from aiohttp import web

from embedgate.bench.connection import Target
from embedgate.bench.endpoints import InferEndpoint
from embedgate.bench.loadgen import run_load


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
        self.arrivals: list[float] = []  # perf_counter times

    async def infer(self, request: web.Request) -> web.Response:
        self.arrivals.append(time.perf_counter())
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
            return web.json_response({"error": {"status": 503}}, status=503, headers={"retry-after": "2"})
        vectors = [[1.0, 0.0]] * (2 if text == "wrong count" else 1)
        return web.json_response(
            {"text_embeddings": vectors, "processingTimeMs": 3.0}, headers={"x-tokenize-time-ms": "0.5"}
        )


@contextlib.asynccontextmanager
async def stand_in():
    # A context manager rather than a fixture: async fixtures run on the session's loop,
    # and the server must run on the test's own.
    server = StandIn()
    async with serving(server.infer) as url:
        yield server, url


@contextlib.asynccontextmanager
async def serving(infer):
    """``infer`` as ``POST /infer`` on a free port of 127.0.0.1; yields the base URL."""
    app = web.Application()
    app.router.add_post("/infer", infer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def load(url: str, timeout_s: float = 10.0, **options):
    return await run_load(Target.from_url(url), InferEndpoint("m"), NumberedPayload(), timeout_s=timeout_s, **options)


async def test_a_fixed_number_of_requests_with_bounded_concurrency():
    async with stand_in() as (server, url):
        run = await load(url, concurrency=4, requests=20, first_index=100)
    assert [r.index for r in run.records] == list(range(100, 120))
    assert len(server.seen) == 20
    assert server.most_inflight == 4
    statuses = [r.status for r in run.records]
    assert statuses.count("503") == 4 and statuses.count("200") == 16
    ok = run.succeeded[0]
    assert ok.embeddings == 1 and ok.server_ms == 3.0 and ok.timings_ms == {"tokenize": 0.5}
    assert ok.latency_s >= 0.05
    assert run.wall_s >= 5 * 0.05  # 20 requests, 4 at a time, 50 ms each


async def test_a_client_refused_with_a_retry_after_waits_it_out_when_asked_to():
    async with stand_in() as (server, url):
        run = await load(url, concurrency=1, requests=5, first_index=3, honor_retry_after=True)
    # Request 3 is refused with Retry-After: 2; the next one leaves that much later.
    assert run.records[0].status == "503" and run.records[0].retry_after_s == 2
    assert server.arrivals[1] - server.arrivals[0] >= 0.05 + 2
    async with stand_in() as (server, url):
        await load(url, concurrency=1, requests=2, first_index=3)
    assert server.arrivals[1] - server.arrivals[0] < 2  # by default, at once


async def test_a_response_with_the_wrong_number_of_embeddings_is_not_a_success():
    async with stand_in() as (_, url):
        run = await load(url, concurrency=2, requests=10)
    assert run.records[7].status == "bad_response"


async def test_a_duration_run_stops_sending_at_the_deadline():
    async with stand_in() as (server, url):
        run = await asyncio.wait_for(load(url, concurrency=3, duration_s=0.3), 60)
        started = time.perf_counter() - run.wall_s  # no earlier than the run's own start
    assert run.wall_s >= 0.3
    assert len(run.records) == len(server.seen) > 3
    assert [r.index for r in run.records] == list(range(len(run.records)))
    # Past the deadline each client may still be answered the request it had sent
    # before it, and sends no other.
    late = [at for at in server.arrivals if at >= started + 0.3]
    assert len(late) <= 3, f"{len(late)} requests arrived after the deadline"


async def test_an_unreachable_server_is_counted_not_raised():
    run = await load("http://127.0.0.1:9", concurrency=2, requests=4)
    assert {r.status for r in run.records} == {"connection_error"}
    assert run.succeeded == []


async def test_exactly_one_of_requests_and_duration():
    with pytest.raises(ValueError):
        await load("http://x", concurrency=1)


class ScriptedPayload:
    """Request i carries ``texts[i]``, which tells the stand-in what to do."""

    kind = "text"
    per_request = 1

    def __init__(self, texts: list[str]):
        self.texts = texts

    def inputs(self, index: int) -> list[str]:
        return [self.texts[index]]


@contextlib.asynccontextmanager
async def scripted_server():
    """Answers ``ok`` at once, ``slow`` only when the test is done, ``close`` with
    Connection: close, ``chunked`` in chunked transfer encoding, and ``drop`` by closing the
    socket unanswered. Records each request's Authorization header."""
    authorizations: list[str | None] = []
    done = asyncio.Event()

    async def infer(request: web.Request) -> web.StreamResponse:
        (text,) = (await request.json())["text"]
        authorizations.append(request.headers.get("Authorization"))
        answer = {"text_embeddings": [[0.5, 0.5]], "processingTimeMs": 1.0}
        if text == "slow":
            await done.wait()
        if text == "drop":
            request.transport.close()
            await done.wait()
        if text == "chunked":
            response = web.StreamResponse()
            response.enable_chunked_encoding()
            response.content_type = "application/json"
            await response.prepare(request)
            body = web.json_response(answer).body
            await response.write(body[:5])
            await response.write(body[5:])
            await response.write_eof()
            return response
        headers = {"Connection": "close"} if text == "close" else {}
        return web.json_response(answer, headers=headers)

    async with serving(infer) as url:
        try:
            yield authorizations, url
        finally:
            done.set()


async def scripted_load(url: str, texts: list[str], timeout_s: float = 5.0, headers=None):
    target = Target.from_url(url, headers)
    return await run_load(
        target, InferEndpoint("m"), ScriptedPayload(texts), concurrency=1, timeout_s=timeout_s, requests=len(texts)
    )


async def test_a_timed_out_request_is_recorded_and_the_next_one_gets_a_fresh_connection():
    async with scripted_server() as (_, url):
        run = await scripted_load(url, ["ok", "slow", "ok"], timeout_s=0.3)
    # ``slow`` is never answered while the load runs: only the timeout ends it.
    assert [r.status for r in run.records] == ["200", "timeout", "200"]
    assert run.records[1].latency_s >= 0.3


async def test_connections_closed_or_dropped_by_the_server_are_replaced():
    async with scripted_server() as (_, url):
        run = await scripted_load(url, ["close", "ok", "drop", "ok", "chunked", "ok"])
    assert [r.status for r in run.records] == ["200", "200", "connection_error", "200", "200", "200"]
    assert run.records[4].embeddings == 1 and run.records[4].server_ms == 1.0


async def test_every_request_carries_the_given_headers():
    async with scripted_server() as (authorizations, url):
        await scripted_load(url, ["ok", "close", "ok"], headers={"Authorization": "Bearer k"})
    assert authorizations == ["Bearer k"] * 3


def test_targets_from_urls():
    target = Target.from_url("http://127.0.0.1:8686/prefix/")
    assert (target.host, target.port, target.tls, target.base_path) == ("127.0.0.1", 8686, None, "/prefix")
    assert target.post_head("/infer").startswith(b"POST /prefix/infer HTTP/1.1\r\nHost: 127.0.0.1:8686\r\n")
    secure = Target.from_url("https://example.test")
    assert (secure.port, secure.tls is not None, secure.base_path) == (443, True, "")
    with pytest.raises(ValueError):
        Target.from_url("ftp://example.test")


async def test_a_load_split_over_processes_sends_each_input_once_and_reports_one_run():
    from embedgate.bench.loadgen import INDEX_STRIDE, run_load_split

    async with stand_in() as (server, url):
        split = await run_load_split(
            2, target=Target.from_url(url), endpoint=InferEndpoint("m"), payload=NumberedPayload(),
            timeout_s=10.0, concurrency=4, requests=21, first_index=100,
        )
    indices = [r.index for r in split.run.records]
    assert indices == [*range(100, 111), *range(100 + INDEX_STRIDE, 110 + INDEX_STRIDE)]
    # Every request reached the server with an input of its own.
    assert len(server.seen) == 21 and server.most_inflight <= 4
    assert split.run.concurrency == 4 and split.run.wall_s > 0
    assert split.client_cpu_s > 0
