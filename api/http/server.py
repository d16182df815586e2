"""The HTTP server: uvicorn's httptools protocol, each answer written to its socket once,
and a lost connection told to its requests.

An ASGI answer comes as two messages, its status and headers, then its body, and uvicorn
writes each to the socket as it comes: two ``send`` system calls per answer, and on
loopback each wakes the client. Measured under 64 clients with a model that costs next to
nothing, those writes were 8% of the event loop's samples. Here what a connection writes
in one turn of the event loop is held and written together at the end of that turn (a
small answer's headers and body are sent in the same turn), so an answer costs one call:
nothing is written later than the turn it was sent in, and the order of the bytes is
kept. Closing or ending the connection writes what is held first.

A request on an inference path is cancelled when its client goes away
(``middleware.CancelOnDisconnect``). ASGI says so only to a ``receive`` call waiting for
``http.disconnect``, which took a task per request (about 29 µs of CPU a request, measured
in-process); the protocol, which sees the connection lost, tells the requests that asked
(``middleware.Disconnects``, offered in the scope's extensions).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .middleware import DISCONNECTS, Disconnects


class _OneWritePerTurn:
    """A connection's transport whose writes in one turn of the loop go out as one."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._held is None:
            self._held = [data]
            self._loop.call_soon(self._flush)
        else:
            self._held.append(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a transport that writes once per turn, telling
    the requests that ask (``CancelOnDisconnect``) when their client goes away: no task per
    request waiting for ASGI's ``http.disconnect``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.disconnects = Disconnects()
        super().connection_made(_OneWritePerTurn(transport, self.loop))  # type: ignore[arg-type]

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope.setdefault("extensions", {})[DISCONNECTS] = self.disconnects  # type: ignore[typeddict-item]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # A body past uvicorn's high-water mark paused reading until the app's next
        # ``receive``, which an app that has its body never makes: reading on, the client's
        # leaving is seen while its request runs (a pipelined request pauses it again).
        if not self.pipeline:
            self.flow.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.disconnects.lost()


def uvicorn_options(log_level: str) -> dict[str, Any]:
    """What the gateway's uvicorn runs with, alone or as one of its workers."""
    return {
        "log_level": log_level,
        "loop": "uvloop",
        "http": HttpProtocol,
        "access_log": False,
        "timeout_graceful_shutdown": 10,
    }
