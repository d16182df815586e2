"""Long work followed live: a load answered as newline-delimited JSON events when the
client asks for ``Accept: application/x-ndjson`` (the ``embedgate load`` command does).

Events, one JSON object per line::

    {"event": "progress", "elapsed_s": 3.1, "message": "exporting ONNX (opset 17)"}
    {"event": "done", "elapsed_s": 41.7, "result": {...the route's usual JSON answer...}}
    {"event": "error", "elapsed_s": 2.0, "error": {"status": 404, "code": "...", "message": "..."}}

The status is 200 once the stream starts, so the outcome is in the last event. The work
runs in its own task: a client that goes away does not cancel a conversion half done
(the result is published and loaded all the same).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

import orjson
from fastapi import Request
from pydantic import BaseModel
from starlette.responses import StreamingResponse

from ...endpoints.statuses import status_of
from ...errors import EmbedgateError
from ...models.progress import Event, Progress
from ..errors import error_body

log = logging.getLogger("embedgate.progress")

NDJSON = "application/x-ndjson"
# For the OpenAPI page of routes that can stream.
STREAM_RESPONSE = {200: {"content": {NDJSON: {}}, "description": "JSON, or NDJSON progress events on request"}}


_running: set[asyncio.Future] = set()


def wants_progress(request: Request) -> bool:
    return NDJSON in request.headers.get("accept", "")


def progress_stream(subject: str, work: Callable[[Progress], Awaitable[BaseModel]]) -> StreamingResponse:
    progress = Progress(subject)
    events: asyncio.Queue[Event] = asyncio.Queue()
    progress.listen(events.put_nowait)
    task = asyncio.ensure_future(work(progress))
    # The loop keeps only weak references to tasks: hold this one until it is done, since
    # a client that leaves takes the stream (and its reference) away.
    _running.add(task)
    task.add_done_callback(_running.discard)
    task.add_done_callback(lambda done: events.put_nowait(_outcome(done, progress)))

    async def lines():
        while True:
            event = await events.get()
            yield orjson.dumps(event) + b"\n"
            if event["event"] != "progress":
                return

    return StreamingResponse(lines(), media_type=NDJSON)


def _outcome(task: asyncio.Future, progress: Progress) -> Event:
    elapsed = round(progress.elapsed(), 2)
    if task.cancelled():
        error = error_body(503, "cancelled", "the server is shutting down")
        return {"event": "error", "elapsed_s": elapsed, **error}
    exc = task.exception()
    if exc is None:
        return {"event": "done", "elapsed_s": elapsed, "result": task.result().model_dump(mode="json")}
    if isinstance(exc, EmbedgateError):
        progress.step(f"failed: {exc.message}")
        return {"event": "error", "elapsed_s": elapsed, **error_body(status_of(exc), exc.code, exc.message)}
    request_id = uuid.uuid4().hex[:12]
    log.error("[%s] failed [%s]", progress.subject, request_id, exc_info=exc)
    error = error_body(500, "internal_error", f"internal error (request id {request_id})")
    return {"event": "error", "elapsed_s": elapsed, **error}
