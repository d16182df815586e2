"""``embedgate serve`` with two gateway workers behind one port, one tritonserver and one
model lifecycle: every worker answers with PyTorch's vectors, a load, unload or delete sent
to one worker is seen by every worker when the answer comes, listings and load progress
answer the same on every worker, one scrape sums the workers, every worker serves TEI's
gRPC API on the shared gRPC port, and a bulk job runs every line once (what happens as what
serves them dies: ``test_worker_faults.py``).

Each worker says who it is in ``x-embedgate-worker``; a client holding one keep-alive
connection talks to one worker, so a test reaches each worker through a connection of
its own (``worker_clients.connections``)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests import tiny_models
from tests.helpers import cosine_rows

from .conftest import MINILM, established_on, start_gateway, wait_ready, wait_until, wait_until_async
from .grpc_clients import embedded_on_connections
from .test_batches import jsonl, line, read_jsonl, wait_done
from .worker_clients import (
    WORKER,
    WORKERS,
    connections,
    each_worker,
    embed,
    pinned_client,
    stub_pids,
    two_workers,
    worker_pids,
)


@pytest.fixture(scope="module")
def served(gateway, minilm_published, tmp_path_factory):
    yield from two_workers(gateway, tmp_path_factory)


def test_every_worker_answers_with_pytorchs_vectors(served, minilm):
    clients = each_worker(served)
    for index, client in clients.items():
        texts = [f"worker {index} embeds sentence number {i} of its own" for i in range(5)]
        response = embed(client, texts)
        assert response.status_code == 200, response.text
        assert response.headers[WORKER] == str(index)
        assert response.headers["x-cached-inputs"] == "0"
        assert cosine_rows(response.json()["text_embeddings"], minilm.encode(texts)).min() >= 0.9999
        client.close()


def test_a_load_through_one_worker_is_served_by_every_worker_then_unload_and_delete_too(served, tmp_path):
    model = tiny_models.dense_model(tmp_path / "tiny", seed=7)
    name = "workers/tiny-dense"
    clients = each_worker(served)
    loader = clients[0]
    # Followed live: the primary's conversion steps reach the worker's stream.
    answer = loader.post(
        "/load_sentence_transformer_model",
        json={"model_name": name, "model_path": str(model)},
        headers={"accept": "application/x-ndjson"},
    )
    assert answer.status_code == 200, answer.text
    events = [json.loads(row) for row in answer.text.splitlines()]
    steps = [event["message"] for event in events if event["event"] == "progress"]
    assert any("exporting" in step for step in steps) and "ready" in steps, steps
    assert events[-1]["event"] == "done" and events[-1]["result"]["converted"] is True, events[-1]
    # At once, on every worker: none answers 404 or 409 for it, each with the library's vector.
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(model), device="cpu").encode(["hello world model"])
    for index, client in clients.items():
        listed = {m["model_name"] for m in client.get("/loaded_models").json()["models"]}
        assert name in listed, (index, listed)
        response = embed(client, ["hello world model"], name)
        assert response.status_code == 200, (index, response.text)
        assert cosine_rows(response.json()["text_embeddings"], reference).min() >= 0.9999, index

    unloaded = clients[1].post("/unload_model", json={"model_name": name})
    assert unloaded.status_code == 200, unloaded.text
    for client in clients.values():
        response = embed(client, ["hello world"], name)
        assert response.status_code == 409 and response.json()["error"]["code"] == "model_not_loaded", response.text

    deleted = clients[0].post("/delete_model", json={"model_name": name})
    assert deleted.status_code == 200, deleted.text
    for client in clients.values():
        response = embed(client, ["hello world"], name)
        assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found", response.text
        client.close()


def test_every_worker_serves_routes_and_token_vectors_from_the_repository(served, tmp_path):
    """What a worker serves a model with comes from the repository, never from the process
    that loaded it: an inference-free model's static query weights, a multi-vector model's
    tokenization per task."""
    from sentence_transformers import MultiVectorEncoder, SparseEncoder

    directories = {
        "workers/free": tiny_models.inference_free_splade(tmp_path / "free", seed=3),
        "workers/colbert": tiny_models.multi_vector_model(tmp_path / "colbert", seed=3),
    }
    clients = each_worker(served)
    for name, directory in directories.items():
        answer = clients[0].post("/load_sentence_transformer_model", json={"model_name": name, "model_path": str(directory)})
        assert answer.status_code == 200, answer.text
    free = SparseEncoder(str(directories["workers/free"]), device="cpu")
    colbert = MultiVectorEncoder(str(directories["workers/colbert"]), device="cpu")
    texts = ["a fox at the bank", "the quick brown dog"]
    queries = free.encode_query(texts, convert_to_sparse_tensor=False).float().numpy()
    tokens = colbert.encode_query(texts, convert_to_numpy=True)
    for index, client in clients.items():
        response = client.post("/infer", json={"model_name": "workers/free", "text": texts, "task": "query"})
        assert response.status_code == 200, (index, response.text)
        for row, want in zip(response.json()["sparse_embeddings"], queries):
            assert row["indices"] == np.flatnonzero(want).tolist(), index
            np.testing.assert_allclose(row["values"], want[row["indices"]], rtol=1e-5)
        response = client.post("/infer", json={"model_name": "workers/colbert", "text": texts, "task": "query"})
        assert response.status_code == 200, (index, response.text)
        for rows, want in zip(response.json()["multi_vector_embeddings"], tokens):
            assert cosine_rows(rows, want).min() >= 0.9999, index
    for name in directories:
        assert clients[0].post("/delete_model", json={"model_name": name}).status_code == 200
    for client in clients.values():
        client.close()


def test_listings_readiness_and_load_progress_answer_the_same_on_every_worker(served, tmp_path):
    """A load followed through worker 1 streams the primary's conversion steps (worker 0's
    stream: the test above); then every worker lists the same models and the same state."""
    model = tiny_models.dense_model(tmp_path / "tiny", seed=9)
    name = "workers/tiny-followed"
    clients = each_worker(served)
    answer = clients[1].post(
        "/load_sentence_transformer_model",
        json={"model_name": name, "model_path": str(model)},
        headers={"accept": "application/x-ndjson"},
    )
    assert answer.status_code == 200 and answer.headers[WORKER] == "1", answer.text
    events = [json.loads(row) for row in answer.text.splitlines()]
    steps = [event["message"] for event in events if event["event"] == "progress"]
    assert any("exporting" in step for step in steps) and "ready" in steps, steps
    assert events[-1]["event"] == "done" and events[-1]["result"]["converted"] is True, events[-1]
    # Connections of their own again: worker 0's sat idle past its keep-alive during the load.
    for client in clients.values():
        client.close()
    clients = each_worker(served)
    try:
        for path, part in (("/loaded_models", "models"), ("/repository_models", "models"), ("/health/ready", "status"),
                           ("/metrics", "model_stats")):  # (its response_cache: each worker's own)
            seen = {index: client.get(path) for index, client in clients.items()}
            assert all(answer.status_code == 200 for answer in seen.values()), path
            assert seen[0].json()[part] == seen[1].json()[part], path
            assert {a.headers[WORKER] for a in seen.values()} == {"0", "1"}
        listed = {m["model_name"] for m in clients[1].get("/repository_models").json()["models"]}
        assert {MINILM, name} <= listed
    finally:
        assert clients[0].post("/delete_model", json={"model_name": name}).status_code == 200
        for client in clients.values():
            client.close()


def test_two_workers_asked_for_one_model_at_once_convert_it_once_and_both_follow_it(served, tmp_path):
    """Both streams follow the one conversion: the load that waits says so and carries the
    running load's steps to its end."""
    model = tiny_models.dense_model(tmp_path / "tiny", seed=8)
    name = "workers/tiny-once"
    clients = each_worker(served)

    async def load_on_both() -> list[httpx.Response]:
        body = {"model_name": name, "model_path": str(model)}
        headers = {"accept": "application/x-ndjson"}
        return await asyncio.gather(*(
            asyncio.to_thread(client.post, "/load_sentence_transformer_model", json=body, headers=headers)
            for client in clients.values()
        ))

    answers = asyncio.run(load_on_both())
    assert [a.status_code for a in answers] == [200] * WORKERS, [a.text for a in answers]
    streams = [[json.loads(row) for row in a.text.splitlines()] for a in answers]
    assert all(events[-1]["event"] == "done" for events in streams), streams
    results = [events[-1]["result"] for events in streams]
    assert sorted(r["converted"] for r in results) == [False] * (WORKERS - 1) + [True]
    for events, result in zip(streams, results):
        steps = [event["message"] for event in events if event["event"] == "progress"]
        assert "ready" in steps, steps
        if not result["converted"]:
            assert steps[0] == "waiting for the load of this model under way" and result["status"] == "already_loaded"
    assert len(re.findall(rf"converted {re.escape(name)} in", served.log())) == 1
    assert clients[0].post("/delete_model", json={"model_name": name}).status_code == 200
    for client in clients.values():
        client.close()


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def test_every_worker_serves_teis_grpc_api_on_the_shared_port(served, minilm):
    """Each worker binds the gRPC port too (SO_REUSEPORT): new connections land on every
    worker, and each answers with the library's vectors."""
    serving = re.compile(r"\[worker \d\]: TEI's gRPC API on [\d.]+:(\d+)")
    wait_until(lambda: len(serving.findall(served.log())) == WORKERS, 60, "every worker serving gRPC")
    [port] = {int(found) for found in serving.findall(served.log())}
    texts = [f"over gRPC, connection {index} embeds this" for index in range(16)]
    with embedded_on_connections(port, texts, MINILM) as vectors:
        assert cosine_rows(vectors, minilm.encode(texts)).min() >= 0.9999
        # Sixteen connections, each accepted by one worker: all on one would be a 1-in-32,768 chance.
        accepted = {index: established_on(pid, port) for index, pid in worker_pids(served).items()}
        assert sum(accepted.values()) == len(texts) and all(accepted.values()), accepted


def test_one_scrape_sums_the_workers(served):
    clients = each_worker(served)

    def infer_count() -> float:
        return served.metric("embedgate_requests_total", endpoint="/infer", model=MINILM, status="200")

    before = infer_count()
    sent = 0
    for index, client in clients.items():
        for i in range(3 + index):
            assert embed(client, [f"counted by worker {index}: {i}"]).status_code == 200
            sent += 1
        client.close()
    assert infer_count() - before == sent
    assert served.metric("embedgate_model_loaded", model=MINILM) == 1
    assert served.metric("embedgate_triton_ready") == 1
    # Every process's CPU, summed: the primary's and each worker's, as /proc has them
    # just before the scrape and just after it.
    pids = [served.process.pid, *worker_pids(served).values()]
    assert len(pids) == 1 + WORKERS
    low = cpu_seconds(pids)
    summed = served.metric("process_cpu_seconds_total")
    high = cpu_seconds(pids)
    assert low - 0.01 <= summed <= high + 0.01, (low, summed, high)


async def test_one_scrape_sums_the_requests_in_flight_on_every_worker(served):
    """A long request in flight on each worker: the scrape counts both."""
    clients = [await pinned_client(served.url, worker) for worker in range(WORKERS)]
    try:
        # Seconds of work each (96 texts of some 90 tokens): both are still in flight when the scrape counts.
        texts = [[f"in flight on worker {w}: {i} " + "word " * 80 for i in range(96)] for w in range(WORKERS)]
        flying = [
            asyncio.create_task(client.post("/infer", json={"model_name": MINILM, "text": texts[w]},
                                            headers={"x-request-timeout": "300"}))
            for w, client in enumerate(clients)
        ]
        inflight = lambda: served.metric("embedgate_inflight_requests", model=MINILM)  # noqa: E731
        await wait_until_async(lambda: inflight() == WORKERS or all(t.done() for t in flying), 120, "both in flight")
        assert not any(task.done() for task in flying), "a request ended before both were in flight"
        answers = await asyncio.gather(*flying)
    finally:
        for client in clients:
            await client.aclose()
    assert [a.headers[WORKER] for a in answers] == [str(w) for w in range(WORKERS)]
    assert [a.status_code for a in answers] == [200] * WORKERS


def test_a_bulk_job_with_two_workers_runs_every_line_once(served, minilm):
    count = 600  # 12 chunks of 50: both workers lease some
    words = "the quick brown fox jumps over the lazy dog while a man eats".split()
    rng = np.random.default_rng(11)
    texts = [" ".join(rng.choice(words, size=int(rng.integers(2, 30)))) + f" {i}" for i in range(count)]
    requests = [line(f"w{i}", {"model": MINILM, "input": text}) for i, text in enumerate(texts)]
    with openai.OpenAI(api_key="x", base_url=f"{served.url}/v1", max_retries=0, timeout=120) as client:
        uploaded = client.files.create(file=("w.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
        done = wait_done(client, batch.id)
        assert done.status == "completed" and done.request_counts.completed == count, done
        rows = read_jsonl(client, done.output_file_id)
    ids = [row["custom_id"] for row in rows]
    assert sorted(ids) == sorted(f"w{i}" for i in range(count))
    # Both workers leased chunks of it, and each chunk was computed once.
    done_lines = re.findall(rf"\[worker (\d+)\]: bulk job {batch.id}: chunk (\d+) done \((\d+) lines\)", served.log())
    assert {worker for worker, _, _ in done_lines} == {str(i) for i in range(WORKERS)}, done_lines
    chunks = sorted(int(chunk) for _, chunk, _ in done_lines)
    assert chunks == list(range(len(chunks))) and sum(int(lines) for _, _, lines in done_lines) == count, done_lines
    # Every line's vector is the library's.
    vectors = np.asarray([row["response"]["body"]["data"][0]["embedding"] for row in rows])
    expected = minilm.encode([texts[int(custom_id[1:])] for custom_id in ids])
    assert cosine_rows(vectors, expected).min() >= 0.9999


def test_shutdown_leaves_nothing_and_a_restart_brings_the_models_back_to_every_worker(served, minilm, tmp_path):
    workers = list(worker_pids(served).values())
    (triton_pid,) = served.children("tritonserver")
    assert served.stop() == 0
    wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in [*workers, triton_pid]), 30, "no process left")
    assert not [p for p in stub_pids(served) if str(triton_pid) in open(f"/proc/{p}/cmdline").read()]
    assert not list(filter(lambda name: name.startswith(f"embedgate_{served.process.pid}_"), os.listdir("/dev/shm")))

    # No preload this time: the manifest the primary kept brings MiniLM back.
    again = start_gateway(served.repository, tmp_path / "again.log", workers=str(WORKERS))
    try:
        wait_ready(again)
        for index, client in connections(again.url).items():
            text = f"after the restart, worker {index}"
            response = embed(client, [text])
            assert response.status_code == 200, response.text
            assert cosine_rows(response.json()["text_embeddings"], minilm.encode([text])).min() >= 0.9999
            client.close()
        assert "loading into Triton" in again.log()
    finally:
        again.stop()
