"""TEI's ``*Stream`` methods: every request of a stream answered by its own call of the
endpoint (so it batches with everyone else's requests), the answers sent in the requests'
order, one each.

Bounded, both ways: at most ``window`` requests of a stream are in flight; past that the
stream's requests are not read until the oldest is answered and its response sent, and a
response is sent only as fast as the client reads (gRPC's flow control holds the send).
A slow reader therefore slows the stream down to its own pace, and nothing is buffered
without bound. A client that cancels (or goes away) cancels the call, which cancels its
requests in flight: they stop costing work where an HTTP request whose client left stops.
The first request that fails ends the stream with its status, after the responses before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TypeVar

Request = TypeVar("Request")
Response = TypeVar("Response")

_END = object()


class _Broken:
    """What the reader found instead of the next request: the request stream's error."""

    def __init__(self, error: Exception):
        self.error = error


async def answered_in_order(
    requests: AsyncIterable[Request], answer: Callable[[Request], Awaitable[Response]], window: int
) -> AsyncIterator[Response]:
    """Each request's ``answer``, in the requests' order, at most ``window`` in flight (a
    request is read only once there is room for it)."""
    room = asyncio.Semaphore(window)
    # Never longer than ``window`` (and an end): a task is put only with a place in the room.
    started: asyncio.Queue[asyncio.Task[Response] | _Broken | object] = asyncio.Queue()

    async def read() -> None:
        try:
            async for request in requests:
                await room.acquire()
                started.put_nowait(asyncio.ensure_future(answer(request)))
        except Exception as error:  # noqa: BLE001 - a broken request stream ends the stream, as a failed answer does
            started.put_nowait(_Broken(error))
            return
        started.put_nowait(_END)

    reader = asyncio.ensure_future(read())
    try:
        while True:
            task = await started.get()
            if task is _END:
                return
            if isinstance(task, _Broken):
                raise task.error
            try:
                response = await task  # type: ignore[misc]
            finally:
                room.release()
            yield response
    finally:
        reader.cancel()
        while not started.empty():
            leftover = started.get_nowait()
            if isinstance(leftover, asyncio.Task):
                leftover.cancel()
