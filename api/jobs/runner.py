"""A gateway's chunk runner: leases chunks, runs their lines, writes their output and records them.

Each gateway process runs one, with a few chunks in hand at a time so that the next chunk's
lines are read and tokenized while the last one's are in Triton. A chunk's texts go through
the embedding service's low-priority lane (``compute/scheduling/coalescing.py``): they fill what
online requests leave. The lease is renewed while the chunk runs; a chunk whose lease is lost
(a stall longer than the lease, its batch cancelled) is dropped, and whoever holds it then
runs it again. Its output is written (whole, under a name of the chunk's) before the chunk
is recorded done, so a process killed at any point costs only the chunks its runner held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

from ..endpoints.envelope import Measure, Outcome
from . import lines
from .coordinator import ERRORS, OUTPUT, file_name, line_id, owner_id, part_name
from .files import JobFiles
from .lines import RequestLine
from .queue import JobQueue
from .records import BatchRecord, Chunk

log = logging.getLogger("embedgate.jobs")


class BatchEndpoint(Protocol):
    """What answers a batch's lines of one URL (``/v1/embeddings``...): the same endpoint
    object as the route's (``api/endpoints/``)."""

    def measure(self, body: dict[str, Any]) -> Measure: ...

    async def answer_lines(self, bodies: list[dict[str, Any]]) -> list[Outcome]:
        """Each body's outcome, in order; a bad body is an outcome, not an exception."""


def output_line(batch_id: str, request: RequestLine, outcome: Outcome) -> bytes:
    """A line of the output or error file, in OpenAI's batch output shape."""
    identifier = line_id(batch_id, request.number)
    response = {"status_code": outcome.status_code, "request_id": identifier, "body": outcome.body}
    line = {"id": identifier, "custom_id": request.custom_id, "response": response, "error": None}
    return orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


class ChunkRunner:
    def __init__(
        self,
        queue: JobQueue,
        files: JobFiles,
        endpoints: dict[str, BatchEndpoint],
        *,
        is_served: Callable[[str], bool],
        ready: Callable[[], bool],
        loads_models: bool = False,
        chunks_in_hand: int,
        poll_s: float,
        lease_s: float,
    ):
        self.queue = queue
        self.files = files
        self.endpoints = endpoints
        self.is_served = is_served
        # Whether a chunk's lines load their model where it is not loaded (loads on a first
        # request): a model unloaded while the batch runs is loaded again, not a failed batch.
        self.loads_models = loads_models
        self.ready = ready
        self.chunks_in_hand = chunks_in_hand
        self.poll_s = poll_s
        self.lease_s = lease_s
        self.owner = owner_id()
        self._wake = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()

    def wake(self) -> None:
        """New work (a batch created): look now rather than at the next poll."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a store or file hiccup must not end the runner
                log.exception("bulk job runner: a round failed; trying again")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_s):
                    await self._wake.wait()

    async def stop(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _round(self) -> None:
        if not self.ready():
            return
        await self.queue.tend()
        while len(self._running) < self.chunks_in_hand:
            leased = await self.queue.lease(self.owner)
            if leased is None:
                return
            task = asyncio.create_task(self._run_chunk(*leased), name=f"chunk-{leased[0].batch_id}-{leased[0].index}")
            self._running.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._wake.set()  # room for another chunk

    async def _run_chunk(self, chunk: Chunk, batch: BatchRecord) -> None:
        work = asyncio.create_task(self._process(chunk, batch))
        try:
            while not work.done():
                done, _ = await asyncio.wait({work}, timeout=self.lease_s / 3)
                if not done and not await self.queue.renew(chunk, self.owner):
                    log.info("bulk job %s: chunk %d no longer ours; dropped", chunk.batch_id, chunk.index)
                    work.cancel()
            await work
        except asyncio.CancelledError:
            work.cancel()
            raise
        except Exception:  # noqa: BLE001 - the lease runs out and the chunk is run again
            log.exception("bulk job %s: chunk %d failed; it will be leased again", chunk.batch_id, chunk.index)

    async def _process(self, chunk: Chunk, batch: BatchRecord) -> None:
        endpoint = self.endpoints[batch.endpoint]
        if not self.loads_models and chunk.model in batch.models and not self.is_served(chunk.model):
            await self.queue.fail(
                batch.id, "model_unloaded",
                f"model '{chunk.model}' was unloaded while the batch ran; load it and submit the rest again",
            )
            return
        path = await asyncio.to_thread(self.files.local, file_name(batch.input_file_id))
        requests = await asyncio.to_thread(lines.read, path, chunk.lines)
        outcomes = await endpoint.answer_lines([request.body for request in requests])
        completed, failed, tokens = await asyncio.to_thread(self._write_parts, batch.id, chunk, requests, outcomes)
        if await self.queue.complete(chunk, self.owner, completed=completed, failed=failed, tokens=tokens):
            log.info("bulk job %s: chunk %d done (%d lines)", chunk.batch_id, chunk.index, len(requests))
        else:
            log.info("bulk job %s: chunk %d was finished elsewhere", chunk.batch_id, chunk.index)

    def _write_parts(
        self, batch_id: str, chunk: Chunk, requests: list[RequestLine], outcomes: list[Outcome]
    ) -> tuple[int, int, int]:
        completed = failed = tokens = 0
        with tempfile.TemporaryDirectory(prefix="embedgate-chunk-") as scratch:
            paths = {which: Path(scratch) / which for which in (OUTPUT, ERRORS)}
            with paths[OUTPUT].open("wb") as good, paths[ERRORS].open("wb") as bad:
                for request, outcome in zip(requests, outcomes, strict=True):
                    ok = outcome.status_code < 400
                    (good if ok else bad).write(output_line(batch_id, request, outcome))
                    completed += ok
                    failed += not ok
                    tokens += outcome.tokens
            for which, path in paths.items():
                if path.stat().st_size:
                    self.files.put(part_name(batch_id, chunk.index, which), path)
        return completed, failed, tokens

