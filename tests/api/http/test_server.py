"""The HTTP server's transport: what a connection writes in one turn of the event loop goes
to the socket in one write, in order; closing writes what is held first; an abort drops it;
and a whole server answers requests through it."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest_asyncio
import uvicorn
from uvicorn.server import ServerState
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from embedgate.api.http.middleware import DISCONNECTS, CancelOnDisconnect
from embedgate.api.http.server import HttpProtocol, _OneWritePerTurn, uvicorn_options


class FakeTransport:
    def __init__(self):
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.extra = {"peername": ("127.0.0.1", 1)}

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_extra_info(self, name: str, default=None):
        return self.extra.get(name, default)


async def test_the_writes_of_one_turn_go_out_as_one_in_their_order():
    real = FakeTransport()
    held = _OneWritePerTurn(real, asyncio.get_running_loop())
    held.write(b"HTTP/1.1 200 OK\r\n\r\n")
    held.write(b"body")
    assert real.writes == []  # held until the turn ends
    await asyncio.sleep(0)
    assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    held.writelines([b"a", b"b"])
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"ab"]
    assert held.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is the transport's


async def test_closing_writes_what_is_held_first_and_an_abort_drops_it():
    real = FakeTransport()
    held = _OneWritePerTurn(real, asyncio.get_running_loop())
    held.write(b"last words")
    held.close()
    assert real.writes == [b"last words"] and real.closed
    await asyncio.sleep(0)  # the turn's flush finds nothing more to write
    assert real.writes == [b"last words"]

    other = FakeTransport()
    held = _OneWritePerTurn(other, asyncio.get_running_loop())
    held.write(b"never sent")
    held.abort()
    await asyncio.sleep(0)
    assert other.writes == [] and other.aborted


async def test_what_is_held_when_the_connection_is_lost_is_dropped():
    real = FakeTransport()
    held = _OneWritePerTurn(real, asyncio.get_running_loop())
    held.write(b"too late")
    real.closed = True  # the client went away before the turn ended
    await asyncio.sleep(0)
    assert real.writes == []


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _streamed():
    for part in (b"one,", b"two,", b"three"):
        yield part
        await asyncio.sleep(0.01)


def _either(working, routed):
    async def app(scope, receive, send):
        inference = scope["type"] == "http" and scope["path"] == "/infer"
        await (working if inference else routed)(scope, receive, send)

    return app


# The server runs in the test's own event loop (fixtures default to the session's).
class Working:
    """An app on an inference path that works until cancelled, saying whether the server
    offered to tell it of its client leaving."""

    def __init__(self):
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.told: bool | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        self.told = DISCONNECTS in scope.get("extensions", {})
        while (await receive()).get("more_body"):  # the whole body, as the fast path reads it
            pass
        self.started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@pytest_asyncio.fixture(loop_scope="function")
async def server():
    working = Working()
    routed = Starlette(routes=[
        Route("/plain", lambda request: PlainTextResponse("x" * 100_000)),
        Route("/stream", lambda request: StreamingResponse(_streamed())),
    ])
    app = CancelOnDisconnect(_either(working, routed), ["/infer"])
    options = {**uvicorn_options("warning"), "loop": "asyncio"}  # the test's own loop runs it
    config = uvicorn.Config(app, host="127.0.0.1", port=_free_port(), lifespan="off", **options)
    assert config.http is HttpProtocol
    running = uvicorn.Server(config)
    task = asyncio.create_task(running.serve())
    while not running.started:
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{config.port}", working
    running.should_exit = True
    await task


async def test_a_server_answers_whole_bodies_and_streams_on_one_connection(server):
    url, _ = server
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(3):  # keep-alive: answer after answer on the same connection
            plain = await client.get("/plain")
            assert plain.status_code == 200 and plain.text == "x" * 100_000
            streamed = await client.get("/stream")
            assert streamed.text == "one,two,three"


async def test_a_client_that_leaves_cancels_its_request_told_by_the_server(server):
    url, working = server
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /infer HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
    await writer.drain()
    await asyncio.wait_for(working.started.wait(), 5)
    writer.close()
    await asyncio.wait_for(working.cancelled.wait(), 5)
    assert working.told  # by the protocol, not by a task waiting for http.disconnect


class SocketTransport(FakeTransport):
    """A connection's transport as the protocol drives it: reading paused and resumed."""

    def __init__(self):
        super().__init__()
        self.reading = True
        self.extra = {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


async def test_a_request_with_a_large_body_still_hears_its_client_leave():
    """uvicorn stops reading when a read leaves more than 64 KiB of body waiting, until the
    app's next ``receive``. Where that read ends the body while the app waits in its last
    ``receive``, the app has its body and never calls again: the socket's end would go
    unread and the request uncancelled."""
    working = Working()
    config = uvicorn.Config(CancelOnDisconnect(working, ["/infer"]), lifespan="off", **uvicorn_options("warning"))
    config.load()
    protocol = HttpProtocol(config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop())
    transport = SocketTransport()
    protocol.connection_made(transport)
    body = b'"' + b"x" * 200_000 + b'"'
    head = b"POST /infer HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    protocol.data_received(head % len(body) + body[:1000])
    for _ in range(5):  # the app reads the first part and waits for more
        await asyncio.sleep(0)
    assert not working.started.is_set() and transport.reading
    protocol.data_received(body[1000:])  # the rest in one read: past the mark
    await asyncio.wait_for(working.started.wait(), 5)
    assert transport.reading  # the end of the socket will be read
    protocol.connection_lost(None)
    await asyncio.wait_for(working.cancelled.wait(), 5)
    assert working.told
