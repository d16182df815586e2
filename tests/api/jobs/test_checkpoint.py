"""The jobs' state outlives the machine that keeps it, where the files live in a bucket: a
coordinator with no store of its own (a new node) takes the copy kept beside the files,
with every file, batch and recorded chunk; a local repository keeps no copy."""

from __future__ import annotations

import json

from embedgate.api.jobs.checkpoint import CHECKPOINT, STORE_FILE, open_coordinator
from embedgate.api.jobs.coordinator import file_name, part_name
from embedgate.api.jobs.records import BatchRecord, Chunk, FileRecord, Line
from embedgate.api.jobs.store import EVERYTHING

NOW = 1_000_000


def batch_of(coordinator, tmp_path, chunks: int = 3) -> BatchRecord:
    rows = [json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/embeddings", "body": {}}) for i in range(chunks)]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(rows) + "\n")
    coordinator.files.put(file_name("file-1"), source)
    coordinator.add_file(FileRecord("file-1", "in.jsonl", "batch", source.stat().st_size, NOW, chunks))
    batch = BatchRecord(id="batch_1", input_file_id="file-1", endpoint="/v1/embeddings", completion_window="24h",
                        status="in_progress", created_at=NOW, expires_at=NOW + 86_400, total=chunks)
    offsets = [sum(len(row) + 1 for row in rows[:i]) for i in range(chunks)]
    planned = [Chunk("batch_1", i, "m", (Line(i + 1, offsets[i], len(rows[i])),), 1) for i in range(chunks)]
    coordinator.add_batch(batch, planned)
    return batch


def test_a_coordinator_on_a_new_machine_takes_the_copy_beside_the_files(s3_bucket, tmp_path):
    first = open_coordinator(s3_bucket.url, tmp_path / "node-a", lease_s=60)
    batch = batch_of(first, tmp_path)
    chunk, _ = first.lease("runner-1")
    part = tmp_path / "part"
    part.write_text('{"custom_id": "c0"}\n')
    first.files.put(part_name(batch.id, chunk.index, "out"), part)
    assert first.complete(chunk, "runner-1", completed=1, failed=0, tokens=2)
    assert s3_bucket.keys(f".embedgate-jobs/{CHECKPOINT}")

    # Node A is gone with its disk: a coordinator on node B starts with no store.
    second = open_coordinator(s3_bucket.url, tmp_path / "node-b", lease_s=60)
    found, progress = second.batch(batch.id, EVERYTHING)
    assert found.status == "in_progress" and progress.done == 1 and progress.chunks == 3
    assert second.file("file-1", EVERYTHING).filename == "in.jsonl"
    # The chunk recorded before is not leased again; the others are.
    leased = {second.lease("runner-2")[0].index, second.lease("runner-2")[0].index}
    assert leased == {1, 2} and second.lease("runner-2") is None


def test_a_node_that_keeps_its_store_uses_its_own(s3_bucket, tmp_path):
    first = open_coordinator(s3_bucket.url, tmp_path / "node", lease_s=60)
    batch_of(first, tmp_path)
    first.store.close()
    again = open_coordinator(s3_bucket.url, tmp_path / "node", lease_s=60)
    assert again.batch("batch_1", EVERYTHING) is not None


def test_a_local_repository_keeps_no_copy(tmp_path):
    coordinator = open_coordinator(str(tmp_path / "repository"), tmp_path / "state", lease_s=60)
    batch_of(coordinator, tmp_path)
    assert coordinator.on_change is None
    assert (tmp_path / "state" / STORE_FILE).exists()
    assert not (tmp_path / "state" / "files" / CHECKPOINT).exists()
