"""The private line between the primary process and its gateway workers: calls both ways
and one-way notes over one Unix socket per worker.

A frame is a 4-byte big-endian length and a pickle. Pickle because both ends are this
package in one server: the socket lives in a directory only the server's user can enter,
and every frame carries the gateway's own objects (a batch record, a lease). An
:class:`~api.errors.EmbedgateError` raised by a call is raised again, as the same class
with the same code and message, on the calling side; anything else arrives as an
internal error, its details logged where it happened.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import EmbedgateError, PrimaryUnavailable

log = logging.getLogger("embedgate.workers")

HEADER = struct.Struct(">I")
# A frame holds a lifecycle message, a coordinator call or one process's metrics text.
MAX_FRAME_BYTES = 256 << 20

Handler = Callable[..., Awaitable[Any]]


def _error_state(exc: BaseException) -> tuple[type[EmbedgateError], dict[str, Any], str]:
    return type(exc), dict(vars(exc)), str(exc)  # type: ignore[return-value]


def _error_from(state: tuple[type[EmbedgateError], dict[str, Any], str]) -> EmbedgateError:
    """The error as raised on the other end: its class, code and message (errors with their
    own constructors, such as PromptError, are rebuilt without calling them)."""
    cls, attributes, message = state
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(attributes)
    return error


class Peer:
    """One end of a channel: ``call`` the other end and await its answer, or ``notify`` it.
    Incoming calls and notes run the handler of their name, each in a task of its own."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handlers: dict[str, Handler]):
        self._reader = reader
        self._writer = writer
        self.handlers = handlers
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self.closed = asyncio.Event()

    @classmethod
    async def connect(cls, path: str, handlers: dict[str, Handler]) -> Peer:
        reader, writer = await asyncio.open_unix_connection(path, limit=MAX_FRAME_BYTES)
        return cls(reader, writer, handlers)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.closed.is_set():
            raise PrimaryUnavailable("the server's primary process is not reachable")
        call_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = answer
        try:
            self._send(("call", call_id, method, args, kwargs))
            ok, value = await answer
        finally:
            self._waiting.pop(call_id, None)
        if ok:
            return value
        raise _error_from(value)

    def notify(self, method: str, *args: Any, **kwargs: Any) -> None:
        if not self.closed.is_set():
            self._send(("note", None, method, args, kwargs))

    def _send(self, message: tuple) -> None:
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self._writer.write(HEADER.pack(len(body)) + body)

    async def run(self) -> None:
        """Read and dispatch until the other end closes; then every pending call fails."""
        try:
            while True:
                size = HEADER.unpack(await self._reader.readexactly(HEADER.size))[0]
                if size > MAX_FRAME_BYTES:
                    raise ConnectionError(f"a frame of {size} bytes")
                kind, call_id, *rest = pickle.loads(await self._reader.readexactly(size))
                if kind == "reply":
                    waiting = self._waiting.get(call_id)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(tuple(rest))
                else:
                    task = asyncio.create_task(self._answer(kind, call_id, *rest))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self._close()

    async def _answer(self, kind: str, call_id: int | None, method: str, args: tuple, kwargs: dict) -> None:
        try:
            result = await self.handlers[method](*args, **kwargs)
            reply = (True, result)
        except EmbedgateError as exc:
            reply = (False, _error_state(exc))
        except Exception as exc:
            log.exception("%s failed on the other end of a worker channel", method)
            reply = (False, _error_state(EmbedgateError(f"internal error in {method}: {type(exc).__name__}")))
        if kind == "call" and not self.closed.is_set():
            try:
                self._send(("reply", call_id, *reply))
            except Exception:
                log.exception("could not answer %s", method)
                self._send(("reply", call_id, False, _error_state(EmbedgateError(f"{method}: an answer not sent"))))

    def _close(self) -> None:
        self.closed.set()
        for waiting in self._waiting.values():
            if not waiting.done():
                waiting.set_result((False, _error_state(PrimaryUnavailable("the other process went away"))))
        self._writer.close()

    async def close(self) -> None:
        self._close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
