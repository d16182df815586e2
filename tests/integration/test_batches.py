"""Bulk jobs through OpenAI's Files and Batch APIs, with the official ``openai`` client,
against the real gateway and tritonserver: the output holds every ``custom_id`` once, with
the embeddings ``/v1/embeddings`` gives; a bad line goes to the error file; cancel; bad
files refused with their line numbers."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import signal
import time

import numpy as np
import openai
import pytest

from tests.helpers import cosine_rows

from .conftest import MINILM, start_gateway, wait_ready

WORDS = "the quick brown fox jumps over the lazy dog while a man is eating food at the bank".split()


def texts(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 40)))) for _ in range(count)]


def line(custom_id: str, body: dict, url: str = "/v1/embeddings") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def jsonl(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def client(gateway, minilm_loaded):
    with openai.OpenAI(api_key="unused", base_url=f"{gateway.url}/v1", max_retries=0, timeout=120) as client:
        yield client


def wait_done(client, batch_id: str, timeout_s: float = 300) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "cancelled", "expired"):
            return batch
        time.sleep(0.2)
    raise AssertionError(f"batch {batch_id} not done in {timeout_s}s: {batch.status}")


def read_jsonl(client, file_id: str) -> list[dict]:
    return [json.loads(row) for row in client.files.content(file_id).text.splitlines()]


def test_the_openai_client_round_trip(client, http):
    inputs = texts(60)
    requests = [line(f"single-{i}", {"model": MINILM, "input": text}) for i, text in enumerate(inputs[:40])]
    requests += [
        line(f"many-{i}", {"model": MINILM, "input": inputs[40 + 5 * i : 45 + 5 * i], "input_type": "query"})
        for i in range(4)
    ]
    requests.append(line("bad-model", {"model": "org/not-loaded", "input": "x"}))
    requests.append(line("bad-body", {"model": MINILM, "input": []}))
    uploaded = client.files.create(file=("requests.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes > 0
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h", metadata={"job": "test"}
    )
    assert batch.status == "in_progress" and batch.metadata == {"job": "test"}
    done = wait_done(client, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (46, 44, 2)

    output = {row["custom_id"]: row for row in read_jsonl(client, done.output_file_id)}
    assert len(output) == 44 and all(row["response"]["status_code"] == 200 for row in output.values())
    errors = {row["custom_id"]: row for row in read_jsonl(client, done.error_file_id)}
    assert set(errors) == {"bad-model", "bad-body"}
    assert errors["bad-model"]["response"]["status_code"] == 404
    assert errors["bad-model"]["response"]["body"]["error"]["code"] == "model_not_found"
    assert errors["bad-body"]["response"]["status_code"] == 400

    # Each answer is /v1/embeddings' answer to the same body.
    for custom_id in ("single-3", "many-2"):
        body = json.loads(requests[int(custom_id.split("-")[1]) + (40 if custom_id.startswith("many") else 0)])["body"]
        online = http.post("/v1/embeddings", json=body).json()
        answer = output[custom_id]["response"]["body"]
        assert answer["usage"] == online["usage"] and answer["model"] == MINILM
        np.testing.assert_allclose(
            [d["embedding"] for d in answer["data"]], [d["embedding"] for d in online["data"]], atol=2e-6
        )
    assert done.usage.input_tokens == sum(row["response"]["body"]["usage"]["total_tokens"] for row in output.values())
    listed = client.batches.list(limit=5)
    assert batch.id in [b.id for b in listed.data]


def test_bad_files_are_refused_with_the_first_bad_lines_number(client):
    good = line("a", {"model": MINILM, "input": "x"})
    cases = {
        "not json": [good, "{not json"],
        "duplicate custom_id": [good, good],
        "unknown url": [good, line("b", {"model": MINILM, "input": "x"}, url="/v1/chat/completions")],
        "method": [good, json.dumps({"custom_id": "c", "method": "GET", "url": "/v1/embeddings", "body": {}})],
    }
    for what, lines in cases.items():
        with pytest.raises(openai.BadRequestError) as refused:
            client.files.create(file=("bad.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
        body = refused.value.body
        assert body["code"] == "invalid_batch_file" and body["message"].startswith("line 2: "), (what, body)


def test_cancel_keeps_what_ran_and_stops_the_rest(client):
    requests = [line(f"r{i}", {"model": MINILM, "input": text}) for i, text in enumerate(texts(3000, seed=1))]
    uploaded = client.files.create(file=("many.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait_done(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    assert done.request_counts.completed < 3000
    if done.output_file_id:
        ids = [row["custom_id"] for row in read_jsonl(client, done.output_file_id)]
        assert len(ids) == len(set(ids)) == done.request_counts.completed


def test_a_finished_batch_cannot_be_cancelled(client):
    small = client.files.create(file=("one.jsonl", io.BytesIO(jsonl([line("x", {"model": MINILM, "input": "x"})]))),
                                purpose="batch")
    batch = client.batches.create(input_file_id=small.id, endpoint="/v1/embeddings", completion_window="24h")
    assert wait_done(client, batch.id).status == "completed"
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)
    client.files.delete(small.id)
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(small.id)


def chunks_run(gateway, batch_id: str) -> set[int]:
    """The chunks of ``batch_id`` this gateway ran to the end, from its log: those it
    recorded done, and those it ran only to find them recorded already."""
    found = re.findall(rf"bulk job {batch_id}: chunk (\d+) (?:done|was finished elsewhere)", gateway.log())
    return {int(index) for index in found}


def chunks_recorded(repository, batch_id: str) -> set[int]:
    """The chunks of ``batch_id`` the jobs' store holds as done."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(repository / ".embedgate-jobs" / "jobs.sqlite3")) as store:
        rows = store.execute("SELECT idx FROM chunks WHERE batch_id = ? AND state = 'done'", (batch_id,))
        return {index for (index,) in rows}


def test_a_gateway_killed_mid_job_resumes_from_its_last_recorded_chunk(gateway, minilm_loaded, minilm, tmp_path):
    """SIGKILL, then a new gateway on the same repository: it finishes the job without
    running again the chunks recorded before the kill, and every custom_id is in the output
    once, with /v1/embeddings' vectors."""
    repository = tmp_path / "repository"
    repository.mkdir()
    # The session's converted MiniLM, copied: a load with no conversion.
    name = MINILM.replace("/", "--")
    shutil.copytree(gateway.repository / name, repository / name)
    chunk = 25
    settings = {"batch_chunk_texts": str(chunk), "preload_models": MINILM}
    first = start_gateway(repository, tmp_path / "first.log", **settings)
    count = 600  # 24 chunks: most still to run when it dies
    requests = [line(f"r{i}", {"model": MINILM, "input": text}) for i, text in enumerate(texts(count, seed=2))]
    try:
        wait_ready(first)
        with openai.OpenAI(api_key="x", base_url=f"{first.url}/v1", max_retries=0, timeout=60) as client:
            uploaded = client.files.create(file=("big.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
            batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
            deadline = time.monotonic() + 120
            while client.batches.retrieve(batch.id).request_counts.completed < 200:
                assert time.monotonic() < deadline, "the job did not start"
                time.sleep(0.05)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(30)
        # What the store holds as done when the gateway died (its log may lack the last).
        recorded = chunks_recorded(repository, batch.id)
        assert 0 < len(recorded) < count // chunk
    finally:
        if first.process.poll() is None:
            first.process.kill()

    second = start_gateway(repository, tmp_path / "second.log", **settings)
    try:
        wait_ready(second)
        with openai.OpenAI(api_key="x", base_url=f"{second.url}/v1", max_retries=0, timeout=60) as client:
            done = wait_done(client, batch.id)
            assert done.status == "completed" and done.request_counts.completed == count
            rows = read_jsonl(client, done.output_file_id)
        ids = [row["custom_id"] for row in rows]
        assert len(ids) == count and set(ids) == {f"r{i}" for i in range(count)}
        # The second gateway ran exactly the chunks not recorded before the kill: none of
        # those again, and with them every chunk of the batch.
        rerun = chunks_run(second, batch.id)
        assert not recorded & rerun, sorted(recorded & rerun)
        assert recorded | rerun == set(range(count // chunk))
        # Every line's vector is the library's (the route answering the same body would
        # answer from the job's rows in the response cache).
        vectors = np.asarray([row["response"]["body"]["data"][0]["embedding"] for row in rows])
        inputs = [json.loads(requests[int(row["custom_id"][1:])])["body"]["input"] for row in rows]
        assert cosine_rows(vectors, minilm.encode(inputs)).min() >= 0.9999
    finally:
        second.stop()


def test_a_line_whose_url_is_not_the_batchs_endpoint_fails_the_batch_naming_it(client):
    requests = [
        line("a", {"model": MINILM, "input": "x"}),
        line("b", {"model": MINILM, "query": "q", "documents": ["d"]}, url="/v1/rerank"),
    ]
    uploaded = client.files.create(file=("mixed.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    assert batch.status == "failed"
    (error,) = batch.errors.data
    assert (error.code, error.line, error.param) == ("mismatched_url", 2, "url")
    assert "/v1/rerank" in error.message and "/v1/embeddings" in error.message
    assert client.batches.retrieve(batch.id).request_counts.completed == 0


def test_bulk_work_takes_no_admission_slot(gateway, minilm_loaded, minilm, tmp_path):
    """A gateway that admits one online request per model at a time, running a long job:
    sequential online requests are all admitted (200 with their own vectors), never
    refused for the job's work."""
    repository = tmp_path / "repository"
    name = MINILM.replace("/", "--")
    shutil.copytree(gateway.repository / name, repository / name)
    narrow = start_gateway(repository, tmp_path / "narrow.log", max_inflight_requests="1", preload_models=MINILM)
    try:
        wait_ready(narrow)
        requests = [line(f"n{i}", {"model": MINILM, "input": text}) for i, text in enumerate(texts(3000, seed=5))]
        with openai.OpenAI(api_key="x", base_url=f"{narrow.url}/v1", max_retries=0, timeout=60) as client:
            uploaded = client.files.create(file=("long.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
            batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
            with narrow.client() as http:
                deadline = time.monotonic() + 120
                while client.batches.retrieve(batch.id).request_counts.completed == 0:
                    assert time.monotonic() < deadline, "the job did not start"
                    time.sleep(0.05)
                online = [f"an online request beside the job, number {i}" for i in range(20)]
                answers = [http.post("/infer", json={"model_name": MINILM, "text": [text]}) for text in online]
                running = client.batches.retrieve(batch.id)
            refused = [a.text for a in answers if a.status_code != 200]
            assert not refused, refused
            assert running.status == "in_progress", "the job ended before the online requests were sent"
            served = np.asarray([a.json()["text_embeddings"][0] for a in answers])
            assert (served @ minilm.encode(online).T).diagonal().min() >= 0.9999
            client.batches.cancel(batch.id)
    finally:
        narrow.stop()


def test_a_job_whose_model_is_unloaded_fails_with_a_clear_message(gateway, http, tmp_path):
    from tests import tiny_models

    name = "org/tiny-batch-model"
    directory = tiny_models.dense_model(tmp_path / "model")
    loaded = http.post("/load_sentence_transformer_model", json={"model_name": name, "model_path": str(directory)})
    assert loaded.status_code == 200, loaded.text
    requests = [line(f"r{i}", {"model": name, "input": text}) for i, text in enumerate(texts(4000, seed=3))]
    try:
        with openai.OpenAI(api_key="x", base_url=f"{gateway.url}/v1", max_retries=0, timeout=60) as client:
            uploaded = client.files.create(file=("tiny.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
            batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
            deadline = time.monotonic() + 120
            while client.batches.retrieve(batch.id).request_counts.completed == 0:
                assert time.monotonic() < deadline, "the job did not start"
                time.sleep(0.05)
            unloaded = http.post("/unload_model", json={"model_name": name})
            assert unloaded.status_code == 200, unloaded.text
            done = wait_done(client, batch.id, timeout_s=180)
        assert done.status == "failed", done
        assert done.errors.data[0].code == "model_unloaded" and name in done.errors.data[0].message
        assert 0 < done.request_counts.completed < 4000 and done.output_file_id is not None
    finally:
        http.post("/delete_model", json={"model_name": name})
