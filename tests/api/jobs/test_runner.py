"""A chunk runner over a fake queue, files and endpoint: a chunk whose model was unloaded
while its batch ran fails the batch with a clear message, unless its lines load their model
(loads on a first request), when the chunk is run and recorded done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embedgate.api.endpoints.envelope import Outcome
from embedgate.api.jobs.coordinator import OUTPUT, part_name
from embedgate.api.jobs.records import BatchRecord, Chunk, Line
from embedgate.api.jobs.runner import ChunkRunner


class Queue:
    def __init__(self):
        self.failed: list[tuple[str, str]] = []
        self.completed: list[tuple[int, int]] = []

    async def fail(self, batch_id: str, code: str, message: str) -> None:
        self.failed.append((code, message))

    async def complete(self, chunk: Chunk, owner: str, *, completed: int, failed: int, tokens: int) -> bool:
        self.completed.append((completed, failed))
        return True


class Files:
    def __init__(self, path: Path):
        self.path = path
        self.parts: dict[str, bytes] = {}

    def local(self, name: str) -> Path:
        return self.path

    def put(self, name: str, path: Path) -> None:
        self.parts[name] = path.read_bytes()


class Endpoint:
    """Answers every line 200 (the runner asks nothing else of a batch's endpoint)."""

    def __init__(self):
        self.asked: list[list[dict]] = []

    async def answer_lines(self, bodies):
        self.asked.append(bodies)
        return [Outcome(200, {"data": [{"embedding": [1.0]}]}, tokens=1) for _ in bodies]


@pytest.fixture
def batch_file(tmp_path):
    """A batch's input of two lines for model "m", and the chunk of both."""
    contents = [
        json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}})
        for i in range(2)
    ]
    data = "\n".join(contents).encode()
    path = tmp_path / "input.jsonl"
    path.write_bytes(data)
    lines, offset = [], 0
    for number, content in enumerate(contents, start=1):
        lines.append(Line(number, offset, len(content)))
        offset += len(content) + 1
    chunk = Chunk("batch_1", 0, "m", tuple(lines), 2)
    batch = BatchRecord(id="batch_1", endpoint="/v1/embeddings", input_file_id="file_1", completion_window="24h",
                        status="in_progress", created_at=0, expires_at=10, models=["m"])
    return path, chunk, batch


def runner(path: Path, *, loads_models: bool) -> tuple[ChunkRunner, Queue, Files, Endpoint]:
    queue, files, endpoint = Queue(), Files(path), Endpoint()
    made = ChunkRunner(queue, files, {"/v1/embeddings": endpoint}, is_served=lambda model: False,  # type: ignore[arg-type]
                       ready=lambda: True, loads_models=loads_models, chunks_in_hand=1, poll_s=1.0, lease_s=30.0)
    return made, queue, files, endpoint


async def test_a_model_unloaded_while_its_batch_runs_fails_the_batch(batch_file):
    path, chunk, batch = batch_file
    chunks, queue, _, endpoint = runner(path, loads_models=False)
    await chunks._process(chunk, batch)
    assert [code for code, _ in queue.failed] == ["model_unloaded"] and "load it" in queue.failed[0][1]
    assert endpoint.asked == [] and queue.completed == []


async def test_where_lines_load_their_model_the_chunk_runs(batch_file):
    path, chunk, batch = batch_file
    chunks, queue, files, endpoint = runner(path, loads_models=True)
    await chunks._process(chunk, batch)
    assert queue.failed == [] and queue.completed == [(2, 0)]
    assert [len(bodies) for bodies in endpoint.asked] == [2]
    output = files.parts[part_name("batch_1", 0, OUTPUT)].decode().splitlines()
    assert [json.loads(line)["custom_id"] for line in output] == ["c0", "c1"]
