"""What the Files and Batches routes call: uploads checked and stored, batches planned and
created, read, listed and cancelled; and this gateway's chunk runner, started and stopped.

Every call names whose files and batches it may find (``Access``); what it creates belongs
to ``access.owner``. A file or batch the caller may not see is not found, in the same words
as one that does not exist."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import BatchNotFound, FileNotFound, InvalidBatchFile, InvalidInput
from ..settings import Settings
from . import chunks, lines
from .coordinator import file_name
from .files import JobFiles
from .queue import JobQueue
from .records import BatchRecord, FileRecord, Progress
from .runner import BatchEndpoint, ChunkRunner
from .store import Access

COMPLETION_WINDOWS = {"24h": 24 * 3600}


@dataclass(frozen=True)
class BatchView:
    batch: BatchRecord
    progress: Progress


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


class JobService:
    def __init__(
        self,
        settings: Settings,
        queue: JobQueue,
        files: JobFiles,
        endpoints: dict[str, BatchEndpoint],
        *,
        is_served: Callable[[str], bool],
        ready: Callable[[], bool],
    ):
        self.settings = settings
        self.queue = queue
        self.files = files
        self.endpoints = endpoints
        self.is_served = is_served
        self.runner = ChunkRunner(
            queue,
            files,
            endpoints,
            is_served=is_served,
            ready=ready,
            loads_models=settings.load_on_first_request,
            chunks_in_hand=settings.batch_chunks_in_hand,
            poll_s=settings.batch_poll_s,
            lease_s=settings.batch_lease_s,
        )
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.runner.run(), name="bulk-job-runner")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.runner.stop()

    # --- files
    async def upload(self, filename: str, purpose: str, path: Path, access: Access) -> FileRecord:
        """Store an uploaded file; a batch file is checked line by line first."""
        if purpose != "batch":
            raise InvalidInput(f"purpose must be 'batch' (the files this server stores are batch inputs), not {purpose!r}")
        size = path.stat().st_size
        if size > self.settings.batch_max_file_bytes:
            raise InvalidBatchFile(f"the file has {size} bytes; the limit is {self.settings.batch_max_file_bytes}")
        count = await asyncio.to_thread(
            lines.check_upload, path, tuple(self.endpoints), self.settings.batch_max_requests
        )
        record = FileRecord(new_id("file-"), filename, purpose, size, int(time.time()), count, access.owner)
        await asyncio.to_thread(self.files.put, file_name(record.id), path)
        await self.queue.add_file(record)
        return record

    async def file(self, file_id: str, access: Access) -> FileRecord:
        record = await self.queue.file(file_id, access)
        if record is None:
            raise FileNotFound(f"no file '{file_id}'")
        return record

    async def list_files(self, purpose: str | None, access: Access) -> list[FileRecord]:
        return await self.queue.list_files(purpose, access)

    async def delete_file(self, file_id: str, access: Access) -> None:
        if not await self.queue.delete_file(file_id, access):
            raise FileNotFound(f"no file '{file_id}'")

    async def content(self, file_id: str, access: Access) -> Iterator[bytes]:
        await self.file(file_id, access)
        return self.files.stream(file_name(file_id))

    # --- batches
    async def create_batch(
        self,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, str] | None,
        access: Access,
    ) -> BatchView:
        source = await self.file(input_file_id, access)
        if source.purpose != "batch":
            raise InvalidInput(f"file '{input_file_id}' is a {source.purpose} file, not a batch input")
        if endpoint not in self.endpoints:
            raise InvalidInput(f"endpoint must be one of {', '.join(self.endpoints)}")
        window = COMPLETION_WINDOWS.get(completion_window)
        if window is None:
            raise InvalidInput(f"completion_window must be one of {', '.join(COMPLETION_WINDOWS)}")
        now = int(time.time())
        batch = BatchRecord(
            id=new_id("batch_"),
            input_file_id=input_file_id,
            endpoint=endpoint,
            completion_window=completion_window,
            status="in_progress",
            created_at=now,
            in_progress_at=now,
            expires_at=now + window,
            metadata=metadata,
            total=source.lines,
            owner=access.owner,
        )
        planned, errors = await asyncio.to_thread(self._plan, batch)
        if errors:
            batch.status, batch.in_progress_at, batch.failed_at, batch.errors = "failed", None, now, errors
            planned = []
        else:
            batch.models = sorted({chunk.model for chunk in planned if self.is_served(chunk.model)})
        await self.queue.add_batch(batch, planned)
        self.runner.wake()
        return BatchView(batch, Progress(len(planned), 0, 0, 0, 0))

    def _plan(self, batch: BatchRecord):
        """The batch's chunks, or the errors that fail it (lines whose URL is not the batch's)."""
        endpoint = self.endpoints[batch.endpoint]
        path = self.files.local(file_name(batch.input_file_id))
        requests, errors = [], []
        for line, content in lines.iterate(path):
            if not content.strip():
                continue
            request = lines.parse(line.number, content)
            if request.url != batch.endpoint:
                errors.append({
                    "code": "mismatched_url", "line": line.number, "param": "url",
                    "message": f"the request's url {request.url!r} is not the batch's endpoint {batch.endpoint!r}",
                })
                continue
            requests.append((line, request.body))
        if errors:
            return [], errors[:100]
        return chunks.plan(batch.id, requests, endpoint.measure, self.settings.batch_chunk_texts), []

    async def batch(self, batch_id: str, access: Access) -> BatchView:
        found = await self.queue.batch(batch_id, access)
        if found is None:
            raise BatchNotFound(f"no batch '{batch_id}'")
        return BatchView(*found)

    async def list_batches(self, after: str | None, limit: int, access: Access) -> list[BatchView]:
        return [BatchView(*found) for found in await self.queue.list_batches(after, limit, access)]

    async def cancel(self, batch_id: str, access: Access) -> BatchView:
        await self.queue.cancel(batch_id, access)
        return await self.batch(batch_id, access)

