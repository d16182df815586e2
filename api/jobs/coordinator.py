"""The batch lifecycle over the store and the files: lease chunks, record them, and finish
batches (completed, cancelled, expired or failed) by joining their chunks' output.

One coordinator per store. On one machine the gateway calls it directly (off the event loop:
every method blocks); in the Ray Serve application one lives in a Ray actor and every
replica's chunk runner calls it there. Finishing a batch is idempotent (its output files have ids
of their own and are written whole), so a coordinator killed while finishing one finishes it
again when it comes back.

States, as OpenAI's Batch API names them::

    in_progress -> finalizing -> completed      every chunk done
                -> finalizing -> expired        past expires_at (the chunks not done: batch_expired)
                -> cancelling -> cancelled      cancelled (once no runner holds a lease on it)
                -> failed                       a model it needs was unloaded

What a client asks of files and batches names whose it may find (``store.Access``): the
caller's key's own, or all for an admin key. It travels with each call, so the same holds
in this process, in a Ray actor and in a workers' primary. A batch's output and error
files belong to the batch's owner.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BatchNotFound, BatchStateConflict
from . import lines
from .files import JobFiles
from .records import BatchRecord, Chunk, FileRecord, Progress
from .store import Access, JobStore

OUTPUT, ERRORS = "out", "err"
# OpenAI's batch output line for a request that never ran.
EXPIRED = {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}


def file_name(file_id: str) -> str:
    return f"files/{file_id}"


def part_name(batch_id: str, index: int, which: str) -> str:
    return f"parts/{batch_id}/{index:06d}.{which}.jsonl"


def output_ids(batch_id: str) -> tuple[str, str]:
    """The ids of a batch's output and error files: fixed, so finishing twice writes the same."""
    suffix = batch_id.removeprefix("batch_")
    return f"file-{suffix}-output", f"file-{suffix}-errors"


def owner_id() -> str:
    """Who holds a lease: this process, on this host."""
    return f"{socket.gethostname()}:{os.getpid()}:{time.monotonic_ns()}"


def _gone_locally(owner: str) -> bool:
    """A lease owner of this host whose process has ended (a killed gateway)."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Coordinator:
    def __init__(self, store: JobStore, files: JobFiles, *, lease_s: float, clock: Callable[[], float] = time.time):
        self.store = store
        self.files = files
        self.lease_s = lease_s
        self.clock = clock
        # Called after a change that must outlive this machine (``checkpoint.py``): a file
        # or batch added, deleted or cancelled, a chunk recorded, a batch finished.
        self.on_change: Callable[[], None] | None = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # --- the chunk runners
    def lease(self, owner: str) -> tuple[Chunk, BatchRecord] | None:
        chunk = self.store.lease(owner, self.lease_s, self.clock())
        if chunk is None:
            return None
        batch = self.store.batch(chunk.batch_id)
        assert batch is not None
        return chunk, batch

    def renew(self, chunk: Chunk, owner: str) -> bool:
        """Keep the lease; False when it is lost, or the batch no longer wants the work."""
        batch = self.store.batch(chunk.batch_id)
        if batch is None or batch.status != "in_progress":
            self.store.release_chunk(chunk, owner)
            return False
        return self.store.renew(chunk, owner, self.lease_s, self.clock())

    def complete(self, chunk: Chunk, owner: str, *, completed: int, failed: int, tokens: int) -> bool:
        """Record ``chunk`` done (its parts are written); the last one finishes its batch."""
        if not self.store.complete(chunk, owner, self.clock(), completed=completed, failed=failed, tokens=tokens):
            return False
        progress = self.store.progress(chunk.batch_id)
        if progress.done == progress.chunks and self.store.update_batch(
            chunk.batch_id, when=("in_progress",), status="finalizing", finalizing_at=int(self.clock())
        ):
            self._finish(chunk.batch_id)
        self._changed()
        return True

    def fail(self, batch_id: str, code: str, message: str) -> None:
        """The batch cannot go on (a model it needs is gone): failed, with what ran so far."""
        if self.store.update_batch(
            batch_id,
            when=("in_progress",),
            status="failed",
            failed_at=int(self.clock()),
            errors=[{"code": code, "message": message}],
        ):
            self._write_outputs(self.store.batch(batch_id))
            self._changed()

    def tend(self) -> None:
        """Housekeeping any chunk runner may run often: leases of this host's dead processes go
        back to the queue; overdue batches expire; cancelled ones and stalled finishes are
        finished."""
        gone = [owner for owner in self.store.lease_owners() if _gone_locally(owner)]
        self.store.release(gone)
        now = self.clock()
        finishing = []
        for batch in self.store.active_batches():
            if batch.status == "in_progress" and now > batch.expires_at:
                if self.store.update_batch(batch.id, when=("in_progress",), status="finalizing", finalizing_at=int(now)):
                    finishing.append(batch.id)
            elif batch.status == "cancelling" and not self.store.live_leases(batch.id, now):
                finishing.append(batch.id)
            elif batch.status == "finalizing" and now - (batch.finalizing_at or now) > self.lease_s:
                finishing.append(batch.id)  # its finisher died: finishing is idempotent
        for batch_id in finishing:
            self._finish(batch_id)
        if finishing:
            self._changed()

    # --- clients: files and batches as the API shows them, each call as ``access`` may see
    def add_file(self, record: FileRecord) -> None:
        self.store.add_file(record)
        self._changed()

    def file(self, file_id: str, access: Access) -> FileRecord | None:
        return self.store.file(file_id, access)

    def list_files(self, purpose: str | None, access: Access) -> list[FileRecord]:
        return self.store.files(purpose, access)

    def delete_file(self, file_id: str, access: Access) -> bool:
        if not self.store.delete_file(file_id, access):
            return False
        self.files.delete([file_name(file_id)])
        self._changed()
        return True

    def add_batch(self, batch: BatchRecord, chunks: list[Chunk]) -> None:
        self.store.add_batch(batch, chunks)
        self._changed()

    def batch(self, batch_id: str, access: Access) -> tuple[BatchRecord, Progress] | None:
        batch = self.store.batch(batch_id, access)
        return None if batch is None else (batch, self.store.progress(batch_id))

    def list_batches(self, after: str | None, limit: int, access: Access) -> list[tuple[BatchRecord, Progress]]:
        batches = self.store.batches(after=after, limit=limit, access=access)
        return [(batch, self.store.progress(batch.id)) for batch in batches]

    def cancel(self, batch_id: str, access: Access) -> BatchRecord:
        batch = self.store.batch(batch_id, access)
        if batch is None:
            raise BatchNotFound(f"no batch '{batch_id}'")
        if batch.status in ("cancelling", "cancelled"):
            return batch
        if not self.store.update_batch(
            batch_id, when=("validating", "in_progress"), status="cancelling", cancelling_at=int(self.clock())
        ):
            raise BatchStateConflict(f"batch '{batch_id}' is {batch.status} and can no longer be cancelled")
        self._changed()
        self.tend()
        return self.store.batch(batch_id)

    # --- finishing
    def _finish(self, batch_id: str) -> None:
        batch = self.store.batch(batch_id)
        if batch is None or batch.status not in ("finalizing", "cancelling"):
            return
        done = self.store.progress(batch_id).done == self.store.chunk_count(batch_id)
        final = "cancelled" if batch.status == "cancelling" else "completed" if done else "expired"
        self._write_outputs(batch, expired=final == "expired")
        now = int(self.clock())
        self.store.update_batch(batch_id, when=(batch.status,), status=final, **{f"{final}_at": now})
        count = self.store.chunk_count(batch_id)
        self.files.delete([part_name(batch_id, index, which) for index in range(count) for which in (OUTPUT, ERRORS)])

    def _write_outputs(self, batch: BatchRecord | None, *, expired: bool = False) -> None:
        """Join the done chunks' parts into the output and error files (and, for an expired
        batch, a batch_expired line for each request that never ran)."""
        if batch is None:
            return
        output_id, errors_id = output_ids(batch.id)
        done = self.store.done_chunks(batch.id)
        counts: dict[str, int] = {}
        with tempfile.TemporaryDirectory(prefix="embedgate-batch-") as scratch:
            for which, file_id in ((OUTPUT, output_id), (ERRORS, errors_id)):
                path = Path(scratch) / which
                written = 0
                with path.open("wb") as joined:
                    for index in done:
                        name = part_name(batch.id, index, which)
                        if self.files.size(name) is None:
                            continue
                        for block in self.files.stream(name):
                            joined.write(block)
                            written += block.count(b"\n")
                    if which == ERRORS and expired:
                        written += self._write_expired(batch, set(done), joined)
                counts[which] = written
                if written:
                    self.files.put(file_name(file_id), path)
                    self.store.add_file(
                        FileRecord(file_id, f"{batch.id}_{'output' if which == OUTPUT else 'errors'}.jsonl",
                                   "batch_output", path.stat().st_size, int(self.clock()), written, batch.owner),
                        replace=True,
                    )
        self.store.update_batch(
            batch.id,
            output_file_id=output_id if counts[OUTPUT] else None,
            error_file_id=errors_id if counts[ERRORS] else None,
        )

    def _write_expired(self, batch: BatchRecord, done: set[int], sink) -> int:
        path = self.files.local(file_name(batch.input_file_id))
        written = 0
        for chunk in self.store.chunks(batch.id):
            if chunk.index in done:
                continue
            for request in lines.read(path, chunk.lines):
                sink.write(json_line({"id": line_id(batch.id, request.number), "custom_id": request.custom_id,
                                      "response": None, "error": EXPIRED}))
                written += 1
        return written


def line_id(batch_id: str, number: int) -> str:
    return f"batch_req_{batch_id.removeprefix('batch_')}_{number}"


def json_line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
