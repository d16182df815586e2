"""Pure ASGI middleware (no per-request BaseHTTPMiddleware overhead).

- ``RequestLimits``: a body-size cap enforced while the body streams in (not after). (The
  content type is the route's to check, after routing: ``routing.BodyRoute``.)
- ``CancelOnDisconnect``: on inference paths, a client that goes away cancels its
  request, so it stops costing tokenization, admission slots and Triton calls. The
  gateway's own HTTP server (``server.py``) says when a connection is lost
  (``Disconnects``); under another server (Ray Serve's proxy) a reader task per request
  waits for ASGI's ``http.disconnect``.
- ``ServedBy``: a header on every answer naming the process that served it (a Ray Serve
  replica, a gateway worker), for operators and for tests of the whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..endpoints.statuses import status_of
from ..errors import BodyTooLarge
from .errors import error_response_for

log = logging.getLogger("embedgate.http")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_BODY_METHODS = {"POST", "PUT", "PATCH"}


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


class RequestLimits:
    """``max_body_bytes`` for every body, but the paths in ``larger`` (file uploads)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, larger: dict[str, int] | None = None):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.larger = larger or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            return await self.app(scope, receive, send)
        limit = self.larger.get(scope["path"], self.max_body_bytes)
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            error = BodyTooLarge(f"request body of {declared} bytes exceeds the limit of {limit}")
            response = error_response_for(scope["path"], status_of(error), error.code, error.message)
            return await response(scope, receive, send)

        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes")
            return message

        await self.app(scope, limited_receive, send)


class _Inbox:
    """The messages the reader task passed on, for the app's ``receive`` (an
    ``asyncio.Queue`` without the parts one reader and one writer never use)."""

    __slots__ = ("_messages", "_waiter")

    def __init__(self) -> None:
        self._messages: deque[Message] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, message: Message) -> None:
        self._messages.append(message)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def get(self) -> Message:
        while not self._messages:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._messages.popleft()


# The scope's extension under which the gateway's HTTP server offers a connection's ``Disconnects``.
DISCONNECTS = "embedgate.disconnects"


class Disconnects:
    """A connection's requests that asked to be told when it is lost: the server calls
    ``lost`` once, when the client goes away."""

    __slots__ = ("_told",)

    def __init__(self) -> None:
        self._told: set[Callable[[], None]] = set()

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when the connection is lost; returns what stops that."""
        self._told.add(callback)
        return lambda: self._told.discard(callback)

    def lost(self) -> None:
        told, self._told = self._told, set()
        for callback in told:
            callback()


class CancelOnDisconnect:
    """The app runs in the request's own task, which is cancelled if the client disconnects
    first: told by the server where it offers ``Disconnects``, else seen by a small reader
    task that feeds the app the body (one extra task per request)."""

    def __init__(self, app: ASGIApp, paths: Iterable[str], prefixes: tuple[str, ...] = ()):
        self.app = app
        self.paths = frozenset(paths)
        # Paths with a part of their own (a model's name): every path that starts so.
        self.prefixes = prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["path"] not in self.paths and not scope["path"].startswith(self.prefixes)):
            return await self.app(scope, receive, send)
        cancel = _Cancel()
        disconnects = scope.get("extensions", {}).get(DISCONNECTS)
        if disconnects is not None:
            stop_watching: Callable[[], object] = disconnects.watch(cancel)
        else:
            inbox = _Inbox()
            stop_watching = asyncio.create_task(_pump(receive, inbox, cancel)).cancel
            receive = inbox.get
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if not cancel.done:
                raise  # cancelled from outside (the server shutting down)
            # Ours: the request ends here, quietly, and the task is no longer cancelling.
            cancel.task.uncancel()
            log.info("client disconnected from %s; cancelled its request", scope["path"])
        else:
            if cancel.done:  # the app swallowed our cancellation: take the request back
                cancel.task.uncancel()
        finally:
            stop_watching()


class _Cancel:
    """Cancels the request's task (the one it is made in) for a client that left."""

    __slots__ = ("task", "done")

    def __init__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task, self.done = task, False

    def __call__(self) -> None:
        self.done = True
        self.task.cancel()


async def _pump(receive: Receive, inbox: _Inbox, cancel: _Cancel) -> None:
    """Reads the body for the app, then waits for the server to report a disconnect."""
    while True:
        message = await receive()
        inbox.put(message)
        if message["type"] == "http.disconnect":
            cancel()
            return


class ServedBy:
    def __init__(self, app: ASGIApp, header: bytes, value: str):
        self.app = app
        self._header = (header, value.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self._header]
            await send(message)

        await self.app(scope, receive, tagged)
