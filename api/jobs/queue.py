"""How a gateway reaches its coordinator of bulk jobs (``coordinator.py``): one typed
interface, :class:`JobQueue`, wherever the coordinator runs. In this process
(:class:`LocalQueue`: its calls block, so they run in a thread); in the primary process of
``embedgate serve --workers N`` (``api/workers/cluster.py``) or in a Ray actor shared by
every replica of the Ray Serve application (``api/ray_serve/jobs.py``), whose transports
carry a call by its name: :class:`ForwardedQueue` keeps that behind the typed methods, and
the far end runs only the protocol's names (:func:`forwarded`)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, TypeVar

from .coordinator import Coordinator
from .records import BatchRecord, Chunk, FileRecord, Progress
from .store import Access

P = ParamSpec("P")
T = TypeVar("T")


class JobQueue(Protocol):
    """The coordinator's calls, as the chunk runner and the job service make them (the
    coordinator's methods of the same names and parameters say what each does)."""

    # --- the chunk runners
    async def tend(self) -> None: ...

    async def lease(self, owner: str) -> tuple[Chunk, BatchRecord] | None: ...

    async def renew(self, chunk: Chunk, owner: str) -> bool: ...

    async def complete(self, chunk: Chunk, owner: str, *, completed: int, failed: int, tokens: int) -> bool: ...

    async def fail(self, batch_id: str, code: str, message: str) -> None: ...

    # --- clients: files and batches as ``access`` may see them
    async def add_file(self, record: FileRecord) -> None: ...

    async def file(self, file_id: str, access: Access) -> FileRecord | None: ...

    async def list_files(self, purpose: str | None, access: Access) -> list[FileRecord]: ...

    async def delete_file(self, file_id: str, access: Access) -> bool: ...

    async def add_batch(self, batch: BatchRecord, chunks: list[Chunk]) -> None: ...

    async def batch(self, batch_id: str, access: Access) -> tuple[BatchRecord, Progress] | None: ...

    async def list_batches(self, after: str | None, limit: int, access: Access) -> list[tuple[BatchRecord, Progress]]: ...

    async def cancel(self, batch_id: str, access: Access) -> BatchRecord: ...


# The protocol's methods: the only names a transport forwards, and a coordinator runs.
METHODS = frozenset(name for name, value in vars(JobQueue).items() if inspect.iscoroutinefunction(value))


def forwarded(target: object, name: str) -> Callable[..., Any]:
    """``target``'s method (a queue's, a coordinator's) that a call sent by ``name`` runs:
    one of the protocol's, never another attribute."""
    if name not in METHODS:
        raise AttributeError(f"{name!r} is not a call of the job queue")
    return getattr(target, name)


class LocalQueue:
    """The coordinator in this process."""

    def __init__(self, coordinator: Coordinator):
        self.coordinator = coordinator
        # SQLite serializes writers anyway; one call at a time keeps the order of a chunk runner's calls.
        self._lock = asyncio.Lock()

    async def _run(self, method: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        async with self._lock:
            return await asyncio.to_thread(method, *args, **kwargs)

    async def tend(self) -> None:
        await self._run(self.coordinator.tend)

    async def lease(self, owner: str) -> tuple[Chunk, BatchRecord] | None:
        return await self._run(self.coordinator.lease, owner)

    async def renew(self, chunk: Chunk, owner: str) -> bool:
        return await self._run(self.coordinator.renew, chunk, owner)

    async def complete(self, chunk: Chunk, owner: str, *, completed: int, failed: int, tokens: int) -> bool:
        return await self._run(
            self.coordinator.complete, chunk, owner, completed=completed, failed=failed, tokens=tokens
        )

    async def fail(self, batch_id: str, code: str, message: str) -> None:
        await self._run(self.coordinator.fail, batch_id, code, message)

    async def add_file(self, record: FileRecord) -> None:
        await self._run(self.coordinator.add_file, record)

    async def file(self, file_id: str, access: Access) -> FileRecord | None:
        return await self._run(self.coordinator.file, file_id, access)

    async def list_files(self, purpose: str | None, access: Access) -> list[FileRecord]:
        return await self._run(self.coordinator.list_files, purpose, access)

    async def delete_file(self, file_id: str, access: Access) -> bool:
        return await self._run(self.coordinator.delete_file, file_id, access)

    async def add_batch(self, batch: BatchRecord, chunks: list[Chunk]) -> None:
        await self._run(self.coordinator.add_batch, batch, chunks)

    async def batch(self, batch_id: str, access: Access) -> tuple[BatchRecord, Progress] | None:
        return await self._run(self.coordinator.batch, batch_id, access)

    async def list_batches(self, after: str | None, limit: int, access: Access) -> list[tuple[BatchRecord, Progress]]:
        return await self._run(self.coordinator.list_batches, after, limit, access)

    async def cancel(self, batch_id: str, access: Access) -> BatchRecord:
        return await self._run(self.coordinator.cancel, batch_id, access)


class ForwardedQueue:
    """A coordinator in another process, each call sent there by name (``_forward``, the
    transport's one method) and run there by :func:`forwarded`."""

    async def _forward(self, name: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def tend(self) -> None:
        await self._forward("tend")

    async def lease(self, owner: str) -> tuple[Chunk, BatchRecord] | None:
        return await self._forward("lease", owner)

    async def renew(self, chunk: Chunk, owner: str) -> bool:
        return await self._forward("renew", chunk, owner)

    async def complete(self, chunk: Chunk, owner: str, *, completed: int, failed: int, tokens: int) -> bool:
        return await self._forward("complete", chunk, owner, completed=completed, failed=failed, tokens=tokens)

    async def fail(self, batch_id: str, code: str, message: str) -> None:
        await self._forward("fail", batch_id, code, message)

    async def add_file(self, record: FileRecord) -> None:
        await self._forward("add_file", record)

    async def file(self, file_id: str, access: Access) -> FileRecord | None:
        return await self._forward("file", file_id, access)

    async def list_files(self, purpose: str | None, access: Access) -> list[FileRecord]:
        return await self._forward("list_files", purpose, access)

    async def delete_file(self, file_id: str, access: Access) -> bool:
        return await self._forward("delete_file", file_id, access)

    async def add_batch(self, batch: BatchRecord, chunks: list[Chunk]) -> None:
        await self._forward("add_batch", batch, chunks)

    async def batch(self, batch_id: str, access: Access) -> tuple[BatchRecord, Progress] | None:
        return await self._forward("batch", batch_id, access)

    async def list_batches(self, after: str | None, limit: int, access: Access) -> list[tuple[BatchRecord, Progress]]:
        return await self._forward("list_batches", after, limit, access)

    async def cancel(self, batch_id: str, access: Access) -> BatchRecord:
        return await self._forward("cancel", batch_id, access)
