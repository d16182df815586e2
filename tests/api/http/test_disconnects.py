"""A client that goes away cancels its request on an inference path, and nothing else: told
by the gateway's HTTP server (``Disconnects`` in the scope), or seen by a reader task
waiting for ASGI's ``http.disconnect`` under another server. Each test runs both ways."""

from __future__ import annotations

import asyncio

import pytest

from embedgate.api.http.middleware import DISCONNECTS, CancelOnDisconnect, Disconnects


class Server:
    """A server's side of one request: its scope and ``receive`` (the body, then nothing
    until the client leaves), and ``leave``, the client going away."""

    def __init__(self, told: bool):
        self.scope = {"type": "http", "method": "POST", "path": "/infer"}
        self._messages = [{"type": "http.request", "body": b"{}", "more_body": False}]
        self._left = asyncio.Event()
        self._disconnects = Disconnects() if told else None
        if self._disconnects is not None:
            self.scope["extensions"] = {DISCONNECTS: self._disconnects}

    async def receive(self):
        if self._messages:
            return self._messages.pop(0)
        await self._left.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self._left.set()
        if self._disconnects is not None:
            self._disconnects.lost()


@pytest.fixture(params=[True, False], ids=["told by the server", "seen by a reader task"])
def server(request):
    return Server(told=request.param)


async def _leaves_once_working(server: Server, working: asyncio.Event) -> None:
    await working.wait()
    server.leave()


class SlowApp:
    """An app that reads its body, then works for 30 s; cancelled, it says so, and goes on
    as if nothing happened where it ``swallows`` the cancellation."""

    def __init__(self, swallows: bool = False):
        self.working = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.swallows = swallows

    async def __call__(self, scope, receive, send):
        await receive()
        self.working.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.set()
            if not self.swallows:
                raise


async def test_client_disconnect_cancels_the_request(server):
    slow_app = SlowApp()
    working, cancelled = slow_app.working, slow_app.cancelled
    leaving = asyncio.create_task(_leaves_once_working(server, working))
    await asyncio.wait_for(CancelOnDisconnect(slow_app, ["/infer"])(server.scope, server.receive, None), 5)
    await leaving
    assert cancelled.is_set()


async def test_other_paths_are_not_cancelled(server):
    server.scope["path"] = "/load_sentence_transformer_model"
    working = asyncio.Event()

    async def app(scope, receive, send):
        await receive()
        working.set()
        await asyncio.sleep(0.05)
        return "loaded"

    leaving = asyncio.create_task(_leaves_once_working(server, working))
    assert await CancelOnDisconnect(app, ["/infer"])(server.scope, server.receive, None) == "loaded"
    await leaving


async def test_finished_requests_are_not_disturbed(server):
    sent = []

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200})

    async def send(message):
        sent.append(message)

    await CancelOnDisconnect(app, ["/infer"])(server.scope, server.receive, send)
    server.leave()  # after the answer: nothing of the request is left to cancel
    await asyncio.sleep(0.01)
    assert sent == [{"type": "http.response.start", "status": 200}]
    assert asyncio.current_task().cancelling() == 0


async def test_a_server_cancelling_the_request_is_not_swallowed(server):
    started = asyncio.Event()

    async def app(scope, receive, send):
        await receive()
        started.set()
        await asyncio.sleep(30)

    task = asyncio.create_task(CancelOnDisconnect(app, ["/infer"])(server.scope, server.receive, None))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_disconnect_leaves_the_task_usable(server):
    """After a disconnect the request's task is not left cancelling: later awaits in it work."""
    slow_app = SlowApp()
    working = slow_app.working

    async def request():
        await CancelOnDisconnect(slow_app, ["/infer"])(server.scope, server.receive, None)
        assert asyncio.current_task().cancelling() == 0
        await asyncio.sleep(0.01)
        return "went on"

    leaving = asyncio.create_task(_leaves_once_working(server, working))
    assert await asyncio.wait_for(request(), 5) == "went on"
    await leaving


async def test_an_app_that_swallows_the_cancellation_leaves_no_cancel_pending(server):
    stubborn_app = SlowApp(swallows=True)
    working = stubborn_app.working

    async def request():
        await CancelOnDisconnect(stubborn_app, ["/infer"])(server.scope, server.receive, None)
        return asyncio.current_task().cancelling()

    leaving = asyncio.create_task(_leaves_once_working(server, working))
    assert await asyncio.wait_for(request(), 5) == 0
    await leaving


def test_a_watch_stopped_is_not_told_and_a_loss_is_told_once():
    disconnects = Disconnects()
    told = []
    stop = disconnects.watch(lambda: told.append("first"))
    disconnects.watch(lambda: told.append("second"))
    stop()
    disconnects.lost()
    disconnects.lost()
    assert told == ["second"]
