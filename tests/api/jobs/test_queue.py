"""The coordinator's calls as one typed protocol: every way to the coordinator (in this
process, a workers' primary, a Ray actor) has each of its methods with its parameters, and
so does the coordinator the forwarded ones end at; a call by any other name is refused."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from embedgate.api.errors import BatchStateConflict
from embedgate.api.jobs.coordinator import Coordinator, file_name
from embedgate.api.jobs.files import LocalFiles
from embedgate.api.jobs.queue import METHODS, ForwardedQueue, JobQueue, LocalQueue, forwarded
from embedgate.api.jobs.records import BatchRecord, Chunk, FileRecord, Line
from embedgate.api.jobs.store import EVERYTHING, JobStore
from embedgate.api.ray_serve.jobs import RayQueue
from embedgate.api.workers.cluster import PrimaryQueue

QUEUES = [LocalQueue, ForwardedQueue, PrimaryQueue, RayQueue]


def differences(implementation: type, *, asynchronous: bool = True) -> list[str]:
    """Where ``implementation`` departs from the protocol: a method missing, not a
    coroutine (or one, for the coordinator), or with other parameters or types."""
    found = []
    for name in sorted(METHODS):
        method = getattr(implementation, name, None)
        if method is None:
            found.append(f"{name}: missing")
            continue
        if inspect.iscoroutinefunction(method) != asynchronous:
            found.append(f"{name}: {'not ' if asynchronous else ''}a coroutine")
        expected = inspect.signature(getattr(JobQueue, name))
        if inspect.signature(method) != expected:
            found.append(f"{name}: {inspect.signature(method)}, not {expected}")
    return found


def test_the_protocol_has_the_coordinators_calls():
    assert {"tend", "lease", "renew", "complete", "fail", "add_file", "cancel"} <= METHODS
    assert not any(name.startswith("_") for name in METHODS)


@pytest.mark.parametrize("queue", QUEUES, ids=lambda queue: queue.__name__)
def test_every_way_to_the_coordinator_has_every_call_of_the_protocol(queue):
    assert differences(queue) == []


def test_the_coordinator_runs_every_call_of_the_protocol_with_its_parameters():
    assert differences(Coordinator, asynchronous=False) == []


def test_a_way_that_lacks_a_call_or_changes_one_is_told():
    class Incomplete:
        async def tend(self) -> None: ...

        async def lease(self, owner: str, wait: float) -> None: ...

    found = differences(Incomplete)
    assert "tend" not in " ".join(found)
    assert any(line.startswith("lease: ") for line in found)
    assert "cancel: missing" in found and len(found) == len(METHODS) - 1


def test_a_forwarded_call_runs_only_the_protocols_names(world):
    queue, _, _ = world
    assert forwarded(queue, "tend") == queue.tend
    for name in ("_run", "coordinator", "__class__", "store"):
        with pytest.raises(AttributeError, match="not a call of the job queue"):
            forwarded(queue, name)


@pytest.fixture
def world(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite3")
    files = LocalFiles(tmp_path / "files")
    coordinator = Coordinator(store, files, lease_s=60)
    yield LocalQueue(coordinator), coordinator, tmp_path
    store.close()


async def exercise(queue: JobQueue, coordinator: Coordinator, tmp_path: Path) -> None:
    """Every call of the protocol through ``queue``, against ``coordinator``: answers and
    the gateway's errors arrive as the coordinator gives them."""
    rows = [b'{"custom_id": "a"}', b'{"custom_id": "b"}']
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(rows) + b"\n")
    coordinator.files.put(file_name("file-1"), source)
    await queue.add_file(FileRecord("file-1", "in.jsonl", "batch", source.stat().st_size, 1, 2))
    assert (await queue.file("file-1", EVERYTHING)).filename == "in.jsonl"
    assert [record.id for record in await queue.list_files("batch", EVERYTHING)] == ["file-1"]
    for batch_id in ("batch_1", "batch_2"):
        batch = BatchRecord(id=batch_id, input_file_id="file-1", endpoint="/v1/embeddings", completion_window="24h",
                            status="in_progress", created_at=1, expires_at=2**40, total=2)
        lines = [Line(1, 0, len(rows[0])), Line(2, len(rows[0]) + 1, len(rows[1]))]
        await queue.add_batch(batch, [Chunk(batch_id, index, "m", (line,), 1) for index, line in enumerate(lines)])
    chunk, batch = await queue.lease("runner-1")
    assert (chunk.batch_id, chunk.index, batch.id, batch.total) == ("batch_1", 0, "batch_1", 2)
    assert await queue.renew(chunk, "runner-1") and not await queue.renew(chunk, "runner-2")
    assert await queue.complete(chunk, "runner-1", completed=1, failed=0, tokens=3)
    await queue.tend()
    batch, progress = await queue.batch("batch_1", EVERYTHING)
    assert (batch.status, progress.done, progress.tokens) == ("in_progress", 1, 3)
    assert [batch.id for batch, _ in await queue.list_batches(None, 10, EVERYTHING)] == ["batch_2", "batch_1"]
    await queue.fail("batch_1", "model_unloaded", "model 'm' was unloaded")
    with pytest.raises(BatchStateConflict, match="can no longer be cancelled"):
        await queue.cancel("batch_1", EVERYTHING)
    assert (await queue.cancel("batch_2", EVERYTHING)).status == "cancelled"
    assert await queue.delete_file("file-1", EVERYTHING)
    assert await queue.file("file-1", EVERYTHING) is None


async def test_the_local_queue_runs_every_call_on_its_coordinator(world):
    queue, coordinator, tmp_path = world
    await exercise(queue, coordinator, tmp_path)
