"""The batch lifecycle over a real SQLite store and local files, with a clock the test moves:
leases, renewals, a chunk recorded once, finishing, cancelling, expiring, failing."""

import json
import os
import socket

import pytest

from embedgate.api.errors import BatchNotFound, BatchStateConflict
from embedgate.api.jobs.coordinator import Coordinator, file_name, output_ids, part_name
from embedgate.api.jobs.files import LocalFiles
from embedgate.api.jobs.records import BatchRecord, Chunk, FileRecord, Line
from embedgate.api.jobs.store import EVERYTHING, Access, JobStore

LEASE_S = 10.0


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


@pytest.fixture
def world(tmp_path):
    clock = Clock()
    files = LocalFiles(tmp_path / "files")
    store = JobStore(tmp_path / "jobs.sqlite3")
    coordinator = Coordinator(store, files, lease_s=LEASE_S, clock=clock)
    yield coordinator, store, files, clock, tmp_path
    store.close()


def add_batch(world, chunks=3, batch_id="batch_1", expires_in=3600):
    coordinator, store, files, clock, tmp_path = world
    rows = [json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/embeddings", "body": {}})
            for i in range(chunks)]
    source = tmp_path / f"{batch_id}.jsonl"
    source.write_text("\n".join(rows) + "\n")
    offsets, offset = [], 0
    for row in rows:
        offsets.append(offset)
        offset += len(row) + 1
    files.put(file_name(f"file-{batch_id}"), source)
    store.add_file(FileRecord(f"file-{batch_id}", "in.jsonl", "batch", offset, int(clock()), chunks))
    batch = BatchRecord(id=batch_id, input_file_id=f"file-{batch_id}", endpoint="/v1/embeddings", completion_window="24h",
                        status="in_progress", created_at=int(clock()), expires_at=int(clock()) + expires_in, total=chunks)
    planned = [Chunk(batch_id, i, "m", (Line(i + 1, offsets[i], len(rows[i])),), 1) for i in range(chunks)]
    coordinator.add_batch(batch, planned)
    return batch


def finish_chunk(world, chunk, owner, text=b'{"custom_id": "x"}\n', which="out"):
    coordinator, _, files, _, tmp_path = world
    part = tmp_path / f"part-{chunk.index}"
    part.write_bytes(text)
    files.put(part_name(chunk.batch_id, chunk.index, which), part)
    return coordinator.complete(chunk, owner, completed=int(which == "out"), failed=int(which == "err"), tokens=3)


def test_chunks_are_leased_once_in_order_and_the_last_finishes_the_batch(world):
    coordinator, store, files, clock, _ = world
    add_batch(world, chunks=2)
    first, _ = coordinator.lease("w1")
    second, _ = coordinator.lease("w2")
    assert (first.index, second.index) == (0, 1) and coordinator.lease("w3") is None
    assert finish_chunk(world, first, "w1")
    assert store.batch("batch_1").status == "in_progress"
    assert finish_chunk(world, second, "w2", b'{"custom_id": "bad"}\n', which="err")
    batch, progress = coordinator.batch("batch_1", EVERYTHING)
    assert batch.status == "completed" and batch.completed_at is not None
    assert (progress.completed, progress.failed, progress.tokens) == (1, 1, 6)
    assert (batch.output_file_id, batch.error_file_id) == output_ids("batch_1")
    assert b"".join(files.stream(file_name(batch.error_file_id))) == b'{"custom_id": "bad"}\n'
    assert store.file(batch.output_file_id).purpose == "batch_output"
    assert files.size(part_name("batch_1", 0, "out")) is None  # parts are gone once joined


def test_a_lease_that_ran_out_goes_to_another_and_the_late_one_cannot_record(world):
    coordinator, store, _, clock, _ = world
    add_batch(world, chunks=1)
    chunk, _ = coordinator.lease("slow")
    assert coordinator.renew(chunk, "slow")
    clock.now += LEASE_S + 1
    again, _ = coordinator.lease("fast")
    assert again.index == chunk.index
    assert not coordinator.renew(chunk, "slow")
    assert not finish_chunk(world, chunk, "slow")
    assert finish_chunk(world, again, "fast")
    assert store.batch("batch_1").status == "completed"


def test_leases_of_this_hosts_dead_processes_are_released_at_once(world):
    coordinator, store, _, clock, _ = world
    add_batch(world, chunks=1)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    chunk, _ = coordinator.lease(f"{socket.gethostname()}:{dead}:1")
    coordinator.tend()  # well before the lease runs out
    again, _ = coordinator.lease("alive")
    assert again.index == chunk.index
    # A live process (this one) keeps its lease.
    add_batch(world, chunks=1, batch_id="batch_2")
    mine, _ = coordinator.lease(f"{socket.gethostname()}:{os.getpid()}:1")
    coordinator.tend()
    assert coordinator.lease("thief") is None and mine.batch_id == "batch_2"


def test_cancel_waits_for_live_leases_then_keeps_what_ran(world):
    coordinator, store, _, clock, _ = world
    add_batch(world, chunks=3)
    done, _ = coordinator.lease("w")
    held, _ = coordinator.lease("w")
    finish_chunk(world, done, "w")
    assert coordinator.cancel("batch_1", EVERYTHING).status == "cancelling"
    assert coordinator.lease("w") is None  # no more work of a cancelling batch
    coordinator.tend()
    assert store.batch("batch_1").status == "cancelling"  # a chunk runner still holds a lease
    assert not coordinator.renew(held, "w")  # it learns, and gives the chunk back
    coordinator.tend()
    batch, progress = coordinator.batch("batch_1", EVERYTHING)
    assert batch.status == "cancelled" and batch.output_file_id and progress.completed == 1


def test_a_finished_batch_cannot_be_cancelled(world):
    coordinator, _, _, _, _ = world
    add_batch(world, chunks=1)
    chunk, _ = coordinator.lease("w")
    finish_chunk(world, chunk, "w")
    with pytest.raises(BatchStateConflict, match="completed"):
        coordinator.cancel("batch_1", EVERYTHING)


def test_an_overdue_batch_expires_with_its_unrun_requests_in_the_error_file(world):
    coordinator, store, files, clock, _ = world
    add_batch(world, chunks=3, expires_in=60)
    chunk, _ = coordinator.lease("w")
    finish_chunk(world, chunk, "w")
    clock.now += 61
    coordinator.tend()
    batch, progress = coordinator.batch("batch_1", EVERYTHING)
    assert batch.status == "expired" and batch.expired_at is not None
    expired = [json.loads(row) for row in b"".join(files.stream(file_name(batch.error_file_id))).splitlines()]
    assert [row["custom_id"] for row in expired] == ["c1", "c2"]
    assert all(row["error"]["code"] == "batch_expired" and row["response"] is None for row in expired)


def test_a_failed_batch_keeps_what_ran_and_says_why(world):
    coordinator, store, _, _, _ = world
    add_batch(world, chunks=2)
    chunk, _ = coordinator.lease("w")
    finish_chunk(world, chunk, "w")
    coordinator.fail("batch_1", "model_unloaded", "model 'm' was unloaded")
    batch, _ = coordinator.batch("batch_1", EVERYTHING)
    assert batch.status == "failed" and batch.errors == [{"code": "model_unloaded", "message": "model 'm' was unloaded"}]
    assert batch.output_file_id is not None and coordinator.lease("w") is None


def test_batches_list_newest_first_in_pages(world):
    coordinator, _, _, _, _ = world
    for n in range(5):
        add_batch(world, chunks=1, batch_id=f"batch_{n}")
    first = [b.id for b, _ in coordinator.list_batches(None, 2, EVERYTHING)]
    assert first == ["batch_4", "batch_3"]
    assert [b.id for b, _ in coordinator.list_batches(first[-1], 10, EVERYTHING)] == ["batch_2", "batch_1", "batch_0"]


# --- ownership: each key finds its own files and batches; an admin finds all
ALICE, BOB = Access(owner="alice-hash"), Access(owner="bob-hash")
ADMIN = Access(owner="admin-hash", everything=True)


def owned_batch(world, owner, batch_id):
    coordinator, store, _, _, _ = world
    add_batch(world, chunks=1, batch_id=batch_id)
    # add_batch stores without an owner; the service stores the creator's.
    store._run("UPDATE batches SET owner = ? WHERE id = ?", owner.owner, batch_id)
    store._run("UPDATE files SET owner = ? WHERE id = ?", owner.owner, f"file-{batch_id}")


def test_another_keys_files_and_batches_are_not_found(world):
    coordinator, store, files, _, _ = world
    owned_batch(world, ALICE, "batch_a")
    owned_batch(world, BOB, "batch_b")
    assert [f.id for f in coordinator.list_files(None, BOB)] == ["file-batch_b"]
    assert [b.id for b, _ in coordinator.list_batches(None, 10, BOB)] == ["batch_b"]
    assert coordinator.file("file-batch_a", BOB) is None and coordinator.batch("batch_a", BOB) is None
    with pytest.raises(BatchNotFound):
        coordinator.cancel("batch_a", BOB)
    assert not coordinator.delete_file("file-batch_a", BOB)
    # Nothing changed for the owner.
    assert coordinator.batch("batch_a", ALICE)[0].status == "in_progress"
    assert coordinator.file("file-batch_a", ALICE) is not None
    assert files.size(file_name("file-batch_a")) is not None


def test_an_admin_finds_and_manages_every_keys(world):
    coordinator, _, _, _, _ = world
    owned_batch(world, ALICE, "batch_a")
    owned_batch(world, BOB, "batch_b")
    assert {b.id for b, _ in coordinator.list_batches(None, 10, ADMIN)} == {"batch_a", "batch_b"}
    assert {f.id for f in coordinator.list_files("batch", ADMIN)} == {"file-batch_a", "file-batch_b"}
    assert coordinator.cancel("batch_b", ADMIN).status in ("cancelling", "cancelled")
    assert coordinator.delete_file("file-batch_a", ADMIN)


def test_a_page_after_another_keys_batch_is_empty_as_after_an_unknown_id(world):
    coordinator, _, _, _, _ = world
    owned_batch(world, BOB, "batch_b0")
    owned_batch(world, ALICE, "batch_a")
    owned_batch(world, BOB, "batch_b1")
    assert [b.id for b, _ in coordinator.list_batches("batch_b1", 10, BOB)] == ["batch_b0"]
    assert coordinator.list_batches("batch_a", 10, BOB) == coordinator.list_batches("batch_unknown", 10, BOB) == []


def test_a_batchs_output_and_error_files_are_its_owners(world):
    coordinator, _, _, _, _ = world
    owned_batch(world, ALICE, "batch_a")
    chunk, _ = coordinator.lease("w")
    assert finish_chunk(world, chunk, "w")
    batch, _ = coordinator.batch("batch_a", ALICE)
    assert batch.status == "completed" and coordinator.file(batch.output_file_id, ALICE).purpose == "batch_output"
    assert coordinator.file(batch.output_file_id, BOB) is None
    assert batch.output_file_id not in {f.id for f in coordinator.list_files(None, BOB)}


def test_rows_without_an_owner_are_found_by_admins_only(world):
    coordinator, _, _, _, _ = world
    add_batch(world, chunks=1, batch_id="batch_old")  # no owner: from before owners, or a server without keys
    assert coordinator.batch("batch_old", ALICE) is None and coordinator.list_files(None, ALICE) == []
    assert coordinator.batch("batch_old", ADMIN) is not None and coordinator.batch("batch_old", EVERYTHING)
