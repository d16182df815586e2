"""``embedgate serve`` with two gateway workers behind one port, one tritonserver and one
model lifecycle: every worker answers with PyTorch's vectors, a load, unload or delete sent
to one worker is seen by every worker when the answer comes, Triton and a worker can die
under load, one scrape sums the workers, and a bulk job runs every line once.

Each worker says who it is in ``x-embedgate-worker``; a client holding one keep-alive
connection talks to one worker, so a test reaches each worker through a connection of
its own (``connections``)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests import tiny_models
from tests.helpers import cosine_rows

from .conftest import (
    MINILM,
    model_stubs,
    processes,
    processes_mentioning,
    start_gateway,
    wait_ready,
    wait_until,
    wait_until_async,
)
from .test_batches import jsonl, line, read_jsonl, wait_done

WORKERS = 2
WORKER = "x-embedgate-worker"


@pytest.fixture(scope="module")
def served(gateway, tmp_path_factory):
    """A server of two workers on a repository of its own, MiniLM (the session's
    conversion, copied) restored at its start."""
    with gateway.client() as http:
        response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
        assert response.status_code == 200, response.text
    root = tmp_path_factory.mktemp("workers")
    name = MINILM.replace("/", "--")
    shutil.copytree(gateway.repository / name, root / "repo" / name)
    server = start_gateway(
        root / "repo", root / "gateway.log", workers=str(WORKERS), preload_models=MINILM, batch_chunk_texts="50",
        # Leases far longer than any test here waits: a dead worker's chunks come back only
        # because the primary gives them back at once.
        batch_lease_s="600",
    )
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


def connections(url: str, workers: int = WORKERS, timeout: float = 600.0) -> dict[int, httpx.Client]:
    """One client per worker, each on a keep-alive connection that worker accepted."""
    found: dict[int, httpx.Client] = {}
    deadline = time.monotonic() + 60
    while len(found) < workers:
        assert time.monotonic() < deadline, f"only workers {sorted(found)} accepted connections"
        client = httpx.Client(base_url=url, timeout=timeout, limits=httpx.Limits(max_connections=1))
        index = int(client.get("/health").headers[WORKER])
        if index in found:
            client.close()
        else:
            found[index] = client
    return found


def embed(client: httpx.Client, texts: list[str], model: str = MINILM) -> httpx.Response:
    return client.post("/infer", json={"model_name": model, "text": texts})


def each_worker(served) -> dict[int, httpx.Client]:
    clients = connections(served.url)
    for index, client in clients.items():
        assert int(client.get("/health").headers[WORKER]) == index, "a connection changed workers"
    return clients


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


def test_two_workers_asked_for_one_model_at_once_convert_it_once(served, tmp_path):
    model = tiny_models.dense_model(tmp_path / "tiny", seed=8)
    name = "workers/tiny-once"
    clients = each_worker(served)

    async def load_on_both() -> list[httpx.Response]:
        body = {"model_name": name, "model_path": str(model)}
        return await asyncio.gather(
            *(asyncio.to_thread(client.post, "/load_sentence_transformer_model", json=body) for client in clients.values())
        )

    answers = asyncio.run(load_on_both())
    assert [a.status_code for a in answers] == [200] * WORKERS, [a.text for a in answers]
    assert sorted(a.json()["converted"] for a in answers) == [False] * (WORKERS - 1) + [True]
    assert len(re.findall(rf"converted {re.escape(name)} in", served.log())) == 1
    assert clients[0].post("/delete_model", json={"model_name": name}).status_code == 200
    for client in clients.values():
        client.close()


def stub_pids(served) -> set[int]:
    """The stubs of this gateway's tritonserver (its repository is in their command line;
    another server's on the same host are not its)."""
    stubs = set(processes_mentioning("triton_python_backend_stub"))
    return stubs & set(processes_mentioning(str(served.repository)))


def worker_pids(served) -> dict[int, int]:
    """Worker index -> pid, from the server's processes."""
    found = {}
    for pid in [pid for pid, _, ppid in processes() if ppid == served.process.pid]:
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"embedgate.api.workers.worker" in args:
            found[int(args[args.index(b"--index") + 1])] = pid
    return found


async def pinned_client(url: str, worker: int) -> httpx.AsyncClient:
    """A client on one keep-alive connection that ``worker`` accepted."""
    deadline = time.monotonic() + 60
    while True:
        client = httpx.AsyncClient(base_url=url, timeout=360, limits=httpx.Limits(max_connections=1))
        if (await client.get("/health")).headers[WORKER] == str(worker):
            return client
        await client.aclose()
        assert time.monotonic() < deadline, f"worker {worker} accepted no connection"


PER_WORKER = 4


def worker_of_text(text: str) -> int:
    """The worker whose connection a ``steady`` client's text was first sent on (its client
    number, the text's second-to-last word, over ``PER_WORKER``)."""
    return int(text.split()[-2]) // PER_WORKER


async def steady(url: str, what: str, answers: list, stop: asyncio.Event, per_worker: int = PER_WORKER) -> None:
    """``per_worker`` clients on each worker's connections (clients ``w * per_worker`` to
    ``(w + 1) * per_worker - 1`` on worker ``w``), each with one MiniLM /infer always in
    flight (a text of its own each time: ``<what> <client> <n>``); a request whose
    connection broke is recorded as such, and the client goes on (on a new connection)."""

    async def loop(client: httpx.AsyncClient, number: int) -> None:
        sent = 0
        try:
            while not stop.is_set():
                text = f"{what} {number} {sent}"
                sent += 1
                try:
                    response = await client.post(
                        "/infer", json={"model_name": MINILM, "text": [text]}, headers={"x-request-timeout": "300"}
                    )
                except httpx.TransportError as exc:
                    answers.append((text, exc))
                    continue
                answers.append((text, response))
        finally:
            await client.aclose()

    clients = [await pinned_client(url, worker) for worker in range(WORKERS) for _ in range(per_worker)]
    await asyncio.gather(*(loop(client, n) for n, client in enumerate(clients)))


async def until(load: asyncio.Task, condition, timeout: float, what: str) -> None:
    """Wait for ``condition`` while the clients run (their failure fails the test)."""
    await wait_until_async(lambda: load.done() or condition(), timeout, what)
    if load.done():
        load.result()


def check_answers(answers: list, minilm) -> tuple[list, list]:
    """The answers that came, each 200 with its own text's vector; and the broken ones."""
    broken = [(text, a) for text, a in answers if isinstance(a, Exception)]
    came = [(text, a) for text, a in answers if not isinstance(a, Exception)]
    assert [a.status_code for _, a in came] == [200] * len(came), [a.text for _, a in came if a.status_code != 200][:5]
    served = np.asarray([a.json()["text_embeddings"][0] for _, a in came])
    assert cosine_rows(served, minilm.encode([text for text, _ in came])).min() >= 0.9999
    return came, broken


def resent_by_each_worker(log: str) -> None:
    """Each worker sent again a request that what was to answer it had lost (the lines its
    resend logs, ``api/compute/backend/resend.py``, under ``[worker N]``)."""
    for index in range(WORKERS):
        assert re.search(rf"\[worker {index}\]: .*sending it again", log), f"worker {index} sent nothing again"


async def test_triton_killed_under_load_every_request_gets_its_own_vector(served, minilm):
    (triton_pid,) = served.children("tritonserver")
    log_start = len(served.log())
    answers: list = []
    stop = asyncio.Event()
    load = asyncio.create_task(steady(served.url, "while triton dies", answers, stop))
    await until(load, lambda: len(answers) >= 40, 120, "answers before the kill")
    os.kill(triton_pid, signal.SIGKILL)
    restarted = await wait_until_async(
        lambda: served.children("tritonserver") not in ([], [triton_pid]), 180, "a new tritonserver"
    )
    assert restarted
    count = len(answers)
    await until(load, lambda: len(answers) >= count + 40, 300, "answers after the restart")
    stop.set()
    await load
    came, broken = check_answers(answers, minilm)
    assert not broken, broken[:3]
    workers = {a.headers[WORKER] for _, a in came}
    assert workers == {str(i) for i in range(WORKERS)}, workers
    resent_by_each_worker(served.log()[log_start:])
    wait_ready(served)


async def test_a_model_process_killed_under_load_is_recovered_once_for_every_worker(served, minilm):
    """The model's stub is SIGKILLed while both workers' clients each have a request in
    flight: the primary recovers it once (the model loaded again, or, where the stub died
    holding the lock of the memory it shares with Triton and tritonserver aborted too,
    Triton restarted), each worker sends again what it had sent to the dead process, and
    every request gets its own vector."""
    (triton_pid,) = served.children("tritonserver")
    name = MINILM.replace("/", "--")
    (stub,) = model_stubs(triton_pid, name)
    log_start = len(served.log())
    answers: list = []
    stop = asyncio.Event()
    load = asyncio.create_task(steady(served.url, "meeting the dead process", answers, stop))
    await until(load, lambda: answered_by(answers, "0") >= 10 and answered_by(answers, "1") >= 10, 120,
                "both workers serving")
    os.kill(stub, signal.SIGKILL)
    await asyncio.to_thread(
        served.wait_log, re.compile("has a new process in Triton|tritonserver restarted in"), 120, log_start
    )
    count = len(answers)
    await until(load, lambda: len(answers) >= count + 40, 120, "answers after the recovery")
    stop.set()
    await load
    came, broken = check_answers(answers, minilm)
    assert not broken, broken[:3]
    assert {a.headers[WORKER] for _, a in came} == {str(i) for i in range(WORKERS)}
    log = served.log()[log_start:]
    resent_by_each_worker(log)
    if "tritonserver restarted in" not in log:
        # Triton ran on: the model was loaded again once, for both workers' requests.
        assert log.count("lost its process in Triton") == 1
        assert served.children("tritonserver") == [triton_pid]
    wait_ready(served)


def answered_by(answers: list, worker: str) -> int:
    return sum(1 for _, a in answers if not isinstance(a, Exception) and a.headers.get(WORKER) == worker)


async def test_a_worker_killed_is_replaced_while_the_others_keep_serving(served, minilm):
    before = worker_pids(served)
    stubs = stub_pids(served)
    assert sorted(before) == list(range(WORKERS)) and stubs
    answers: list = []
    stop = asyncio.Event()
    load = asyncio.create_task(steady(served.url, "while a worker dies", answers, stop))
    await until(load, lambda: len(answers) >= 40, 120, "answers before the kill")
    os.kill(before[0], signal.SIGKILL)
    at_kill = len(answers)
    await until(load, lambda: worker_pids(served).get(0) not in (None, before[0]), 120, "a new worker 0")
    # The survivor kept answering while worker 0 was gone and its replacement started.
    await until(load, lambda: answered_by(answers[at_kill:], "1") >= 10, 120, "worker 1 answering after the kill")
    replaced = worker_pids(served)[0]
    # The new worker takes new connections and serves, with its own answers.
    await asyncio.to_thread(wait_ready, served)
    client = await pinned_client(served.url, 0)
    text = "asked of the new worker 0"
    try:
        fresh = await client.post("/infer", json={"model_name": MINILM, "text": [text]})
    finally:
        await client.aclose()
    answers.append((text, fresh))
    stop.set()
    await load
    came, broken = check_answers(answers, minilm)
    # Only the requests in flight on the killed worker's connections broke: at most one per
    # client, each a client of worker 0's.
    clients = [int(text.split()[-2]) for text, _ in broken]
    assert len(clients) == len(set(clients)), broken
    assert {worker_of_text(text) for text, _ in broken} <= {0}, broken
    assert replaced != before[0]
    # The new worker took the model without Triton loading it again.
    assert stub_pids(served) == stubs
    assert "reloaded" not in served.log().split("exited (code -9)")[-1]


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
    # Every process's CPU, summed: more than the primary's alone (read after the scrape, so
    # at least what it was then; the workers, which served every request, add theirs).
    summed = served.metric("process_cpu_seconds_total")
    fields = Path(f"/proc/{served.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    primary = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    assert summed > primary, (summed, primary)


def test_a_bulk_job_with_two_workers_runs_every_line_once(served, minilm):
    count = 1200
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


def test_a_worker_killed_mid_job_gives_its_chunks_back_at_once_and_every_line_runs_once(served, minilm):
    """A worker SIGKILLed while a bulk job runs: the chunks it held (each worker keeps two in
    hand) go back to the queue at once, not after their 600 s lease, and the job finishes
    with every line answered once, with the library's vector."""
    count = 4000
    rng = np.random.default_rng(12)
    words = "a worker dies while the bulk job runs on and every line is answered once".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(2, 24)))) + f" killed-mid-job {i}" for i in range(count)]
    requests = [line(f"k{i}", {"model": MINILM, "input": text}) for i, text in enumerate(texts)]
    victim = worker_pids(served)[0]
    with openai.OpenAI(api_key="x", base_url=f"{served.url}/v1", max_retries=0, timeout=120) as client:
        uploaded = client.files.create(file=("k.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    served.wait_log(re.compile(rf"\[worker 0\]: bulk job {batch.id}: chunk \d+ done"), 300)
    os.kill(victim, signal.SIGKILL)
    at_kill = len(served.log())
    # A client of its own after the kill (the one before may have been the dead worker's).
    with openai.OpenAI(api_key="x", base_url=f"{served.url}/v1", max_retries=0, timeout=120) as client:
        # Still running when the worker died: it held chunks of it.
        running = client.batches.retrieve(batch.id)
        assert running.status == "in_progress" and running.request_counts.completed < count, running
        done = wait_done(client, batch.id, timeout_s=300)
        assert done.status == "completed" and done.request_counts.completed == count, done
        rows = read_jsonl(client, done.output_file_id)
    ids = [row["custom_id"] for row in rows]
    assert sorted(ids) == sorted(f"k{i}" for i in range(count))
    done_lines = re.findall(rf"bulk job {batch.id}: chunk (\d+) done \((\d+) lines\)", served.log())
    chunks = sorted(int(chunk) for chunk, _ in done_lines)
    assert chunks == list(range(len(chunks))) and sum(int(lines) for _, lines in done_lines) == count
    assert re.search(rf"bulk job {batch.id}: chunk \d+ done", served.log()[at_kill:]), "nothing ran after the kill"
    vectors = np.asarray([row["response"]["body"]["data"][0]["embedding"] for row in rows])
    assert cosine_rows(vectors, minilm.encode([texts[int(custom_id[1:])] for custom_id in ids])).min() >= 0.9999
    # The pool started another worker 0; the server serves on with both.
    wait_until(lambda: worker_pids(served).get(0) not in (None, victim), 120, "a new worker 0")
    wait_ready(served)


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
