"""One soak of every fault at once: two gateway workers; steady clients on two models (each
text its own, the response cache off); a bulk job; a model loaded, unloaded and loaded
again over and over; and in turn a model's stub SIGKILLed, tritonserver SIGKILLed, a worker
SIGKILLed and a conversion killed mid-way.

At the end every online answer is 200 with the library's vector of its own text, or a
documented refusal (503 with Retry-After, 504); after each fault both models answer 200
again within that fault's bound (``RECOVERY_BOUND_S``), nothing failing after
(``recovery.py``); the only broken connections are those the killed worker held, at most
two per client (docs/limits.md says why); every bulk line is answered once with the
library's vector; the churned model serves the library's vector; no file is left in the
repository that its listing does not show; and once the server stops, no process of it is
left. ``make test`` runs one round of the four faults; ``EMBEDGATE_SOAK_ROUNDS`` runs more
(each round's bulk job is as long again).
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests import tiny_models
from tests.helpers import cosine_rows, words_of

from .conftest import (
    MINILM,
    model_stubs,
    processes_mentioning,
    start_gateway,
    wait_ready,
    wait_until,
    wait_until_async,
)
from .recovery import Clock, recovered
from .test_batches import jsonl, line, read_jsonl
from .test_reliability import assert_nothing_half_written, converter_processes
from .worker_clients import WORKER, WORKERS, steady, stub_pids, until, worker_pids

ROUNDS = int(os.environ.get("EMBEDGATE_SOAK_ROUNDS", "1"))
TINY = "soak/tiny"
CHURNED = "soak/churned"
PER_WORKER = 2  # steady clients of each model on each worker
BULK_LINES = 1500 * ROUNDS
# From each fault to the first 200 each model computed with nothing failing after (measured
# on 2 cores beside other test runs, with the bulk job and the churn running: see
# docs/limits.md's table); the bounds leave room for a machine loaded more.
RECOVERY_BOUND_S = {"stub": 30.0, "tritonserver": 30.0, "worker": 10.0, "conversion": 10.0}


@pytest.fixture(scope="module")
def soaked(gateway, minilm_published, tmp_path_factory):
    """Two workers on a repository of their own (the session's MiniLM conversion, copied),
    the response cache off, bulk chunks of 50 leased far longer than the test waits."""
    with gateway.client() as http:
        response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
        assert response.status_code == 200, response.text
    root = tmp_path_factory.mktemp("soak-faults")
    name = MINILM.replace("/", "--")
    shutil.copytree(gateway.repository / name, root / "repo" / name)
    server = start_gateway(
        root / "repo", root / "gateway.log", workers=str(WORKERS), preload_models=MINILM, response_cache_mb="0",
        batch_chunk_texts="50", batch_lease_s="600",
    )
    try:
        wait_ready(server)
        yield server
    finally:
        if server.process.poll() is None:
            server.stop()


@pytest.mark.soak
async def test_every_fault_in_turn_under_load_loses_nothing(soaked, minilm, tmp_path):
    from sentence_transformers import SentenceTransformer

    tiny_dir = tiny_models.dense_model(tmp_path / "tiny", seed=21)
    churned_dir = tiny_models.dense_model(tmp_path / "churned", seed=22)
    crashed_dir = tiny_models.dense_model(tmp_path / "crashed", seed=23)
    tiny = SentenceTransformer(str(tiny_dir), device="cpu")
    churned = SentenceTransformer(str(churned_dir), device="cpu")
    async with httpx.AsyncClient(base_url=soaked.url, timeout=600) as admin:
        loaded = await admin.post("/load_sentence_transformer_model", json={"model_name": TINY, "model_path": str(tiny_dir)})
        assert loaded.status_code == 200, loaded.text

        answers = {MINILM: [], TINY: []}
        clock = Clock()
        # (fault, when), in order.
        faulted: list[tuple[str, float]] = []
        stop = asyncio.Event()
        load = asyncio.gather(
            steady(soaked.url, "soak minilm", answers[MINILM], stop, PER_WORKER, MINILM, clock),
            steady(soaked.url, "soak tiny", answers[TINY], stop, PER_WORKER, TINY, clock),
        )
        churn_log: list[tuple[str, httpx.Response | Exception]] = []
        churn = asyncio.create_task(churn_loop(admin, churned_dir, churn_log, stop))
        # The tiny model's words, so that each line has a vector of its own.
        bulk_texts = [f"{words_of('soak bulk', i)} line {i}: " + " ".join(["text"] * (i % 23)) for i in range(BULK_LINES)]
        batch_id = await asyncio.to_thread(start_job, soaked.url, bulk_texts)
        faults: Counter[str] = Counter()
        # The requests each worker kill broke (by id), one set per round.
        broken_by_kill: list[set[int]] = []

        def answered() -> int:
            return len(answers[MINILM]) + len(answers[TINY])

        async def go_on(what: str, more: int = 40) -> None:
            count = answered()
            await until(load, lambda: answered() >= count + more, 300, f"answers {what}")

        await go_on("before the first fault")
        for _ in range(ROUNDS):
            # 1. MiniLM's stub in Triton: the model loaded again (or Triton restarted).
            (triton_pid,) = soaked.children("tritonserver")
            (stub,) = model_stubs(triton_pid, MINILM.replace("/", "--"))
            at = len(soaked.log())
            os.kill(stub, signal.SIGKILL)
            faulted.append(("stub", time.monotonic()))
            faults["stub"] += 1
            pattern = re.compile("has a new process in Triton|tritonserver restarted in")
            await asyncio.to_thread(soaked.wait_log, pattern, 180, at)
            await go_on("after the stub's death")

            # 2. tritonserver itself: restarted with every model loaded again.
            (triton_pid,) = soaked.children("tritonserver")
            at = len(soaked.log())
            os.kill(triton_pid, signal.SIGKILL)
            faulted.append(("tritonserver", time.monotonic()))
            faults["tritonserver"] += 1
            await asyncio.to_thread(soaked.wait_log, "tritonserver restarted in", 300, at)
            await go_on("after tritonserver's restart")

            # 3. A worker: replaced while the other serves on.
            victim = worker_pids(soaked)[0]
            os.kill(victim, signal.SIGKILL)
            faulted.append(("worker", time.monotonic()))
            faults["worker"] += 1
            await until(load, lambda v=victim: worker_pids(soaked).get(0) not in (None, v), 120, "a new worker 0")
            everything = [*answers[MINILM], *answers[TINY], *churn_log]
            before = set().union(*broken_by_kill)
            broken_by_kill.append({id(a) for _, a in everything if isinstance(a, Exception)} - before)
            await go_on("after the worker's death")

            # 4. A conversion, killed once it is loading the model: nothing published. The
            # churned model's own conversion (its first load's) over first: on a starved
            # machine it can still run here, and the kill would take it too.
            await wait_until_async(
                lambda: any(step == "load" and getattr(answer, "status_code", None) == 200 for step, answer in churn_log),
                300, "the churned model's first load",
            )
            at = len(soaked.log())
            crash = asyncio.create_task(
                admin.post("/load_sentence_transformer_model", json={"model_name": "soak/crashed", "model_path": str(crashed_dir)})
            )
            await wait_until_async(lambda: converter_processes(soaked), 120, "the conversion to start")
            loading = re.compile(r"\[soak/crashed\] \[\s*[\d.]+s\] loading model")
            await asyncio.to_thread(soaked.wait_log, loading, 120, at)
            for pid in converter_processes(soaked):
                os.kill(pid, signal.SIGKILL)
            faulted.append(("conversion", time.monotonic()))
            faults["conversion"] += 1
            crashed = await crash
            assert crashed.status_code == 500 and crashed.json()["error"]["code"] == "conversion_crashed", crashed.text
            assert_nothing_half_written(soaked.repository, "soak--crashed")
            await go_on("after the conversion's death")

        # The churned model loaded, asked and unloaded whole at least twice by now.
        await until(churn, lambda: full_cycles(churn_log) >= 2, 300, "two whole churn cycles")
        stop.set()
        await load
        await churn
        job = await asyncio.to_thread(finish_job, soaked.url, batch_id)
        # The churned model ends loaded, served with its library's vector.
        final = await admin.post("/load_sentence_transformer_model", json={"model_name": CHURNED, "model_path": str(churned_dir)})
        assert final.status_code == 200, final.text
        served = await admin.post("/infer", json={"model_name": CHURNED, "text": ["churned at the end"]})
        assert served.status_code == 200, served.text
        assert cosine_rows(served.json()["text_embeddings"], churned.encode(["churned at the end"])).min() >= 0.9999
        listing = (await admin.get("/repository_models")).json()["models"]

    counts = Counter()
    for model, library in ((MINILM, minilm), (TINY, tiny)):
        counts.update(check_online(answers[model], library, broken_by_kill, model))
    recoveries = [
        recovered(answers[model], clock, f"{fault} SIGKILLed ({model})", at, until)
        for (fault, at), (_, until) in zip(faulted, [*faulted[1:], ("end", float("inf"))])
        for model in (MINILM, TINY)
    ]
    print("\n" + "\n".join(str(recovery) for recovery in recoveries))
    for recovery in recoveries:
        assert recovery.seconds <= RECOVERY_BOUND_S[recovery.fault.split()[0]], recovery
    counts.update(check_churn(churn_log, broken_by_kill, churned))
    counts.update(check_job(job, bulk_texts, tiny, soaked.log()))
    print(f"\nsoak of every fault, {ROUNDS} round(s): faults {dict(faults)}, {dict(sorted(counts.items()))}")
    assert faults == {"stub": ROUNDS, "tritonserver": ROUNDS, "worker": ROUNDS, "conversion": ROUNDS}
    assert counts["churn cycles"] >= 2, counts
    assert_repository_as_listed(soaked.repository, listing)
    assert_nothing_left(soaked)


async def churn_loop(admin: httpx.AsyncClient, directory: Path, log: list, stop: asyncio.Event) -> None:
    """Load, ask and unload one model over and over (converted at its first load only)."""
    body = {"model_name": CHURNED, "model_path": str(directory)}
    steps = [
        ("load", "/load_sentence_transformer_model", body),
        ("infer", "/infer", {"model_name": CHURNED, "text": ["churned"]}),
        ("unload", "/unload_model", {"model_name": CHURNED}),
    ]
    while not stop.is_set():
        for step, path, request in steps:
            try:
                log.append((step, await admin.post(path, json=request)))
            except httpx.TransportError as exc:  # its connection was the killed worker's
                log.append((step, exc))
        await asyncio.sleep(0.2)


def full_cycles(log: list) -> int:
    statuses = [(step, getattr(response, "status_code", None)) for step, response in log]
    whole = [("load", 200), ("infer", 200), ("unload", 200)]
    return sum(statuses[i : i + 3] == whole for i in range(0, len(statuses) - 2, 3))


def start_job(url: str, texts: list[str]) -> str:
    requests = [line(f"b{i}", {"model": TINY, "input": text}) for i, text in enumerate(texts)]
    with openai.OpenAI(api_key="x", base_url=f"{url}/v1", max_retries=0, timeout=120) as client:
        uploaded = client.files.create(file=("soak.jsonl", io.BytesIO(jsonl(requests))), purpose="batch")
        return client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h").id


def finish_job(url: str, batch_id: str) -> tuple[object, list[dict]]:
    from .test_batches import wait_done

    with openai.OpenAI(api_key="x", base_url=f"{url}/v1", max_retries=0, timeout=120) as client:
        done = wait_done(client, batch_id, timeout_s=600)
        return done, read_jsonl(client, done.output_file_id) if done.output_file_id else []


def refused_as_documented(response: httpx.Response) -> bool:
    """A 503 with Retry-After or a 504, in the one error shape."""
    error = response.json().get("error", {})
    if error.get("status") != response.status_code or not error.get("message"):
        return False
    return response.status_code == 504 or (response.status_code == 503 and bool(response.headers.get("retry-after")))


def check_online(answers: list, library, broken_by_kill: list[set[int]], model: str) -> Counter:
    counts: Counter[str] = Counter()
    served, texts, broken_clients = [], [], []
    for text, answer in answers:
        if isinstance(answer, Exception):
            # Broken only where a worker died under it: its connections, one per client a
            # kill (the first kill: clients first pinned to worker 0; later, clients have
            # moved to whichever worker took their new connection).
            (kill,) = [n for n, broken in enumerate(broken_by_kill) if id(answer) in broken] or [None]
            assert kill is not None, f"a request broke where no worker died: {model} {text} {answer!r}"
            client = int(text.split()[-2])
            assert kill > 0 or client // PER_WORKER == 0, f"a client of worker 1 lost a request: {text}"
            broken_clients.append((kill, client))
            counts[f"{model} broken"] += 1
        elif answer.status_code == 200:
            served.append(answer.json()["text_embeddings"][0])
            texts.append(text)
            counts[f"{model} 200 from worker {answer.headers[WORKER]}"] += 1
        else:
            assert refused_as_documented(answer), (model, answer.status_code, answer.text)
            counts[f"{model} {answer.status_code}"] += 1
    # A client whose connection broke connects again at once, and that connection can still
    # reach the dying worker's socket before the kernel closes it: two breaks per client at
    # most (docs/limits.md).
    assert max(Counter(broken_clients).values(), default=0) <= 2, broken_clients
    assert texts, f"nothing of {model} was answered"
    assert cosine_rows(np.asarray(served), library.encode(texts)).min() >= 0.9999, model
    return counts


def check_churn(log: list[tuple[str, httpx.Response | Exception]], broken_by_kill: list[set[int]], library) -> Counter:
    """Each cycle's load, ask and unload: 200 (the answer the library's vector), a documented
    refusal, or broken by a worker's death; where the load did not answer 200 (the client
    never heard it was loaded), the ask and the unload may also find it not loaded (409)."""
    counts: Counter[str] = Counter()
    expected = library.encode(["churned"])
    for start in range(0, len(log), 3):
        cycle = log[start : start + 3]
        load_answered = not isinstance(cycle[0][1], Exception) and cycle[0][1].status_code == 200
        for step, response in cycle:
            if isinstance(response, Exception):
                assert any(id(response) in broken for broken in broken_by_kill), (step, response)
                counts[f"churn {step} broken"] += 1
                continue
            counts[f"churn {step} {response.status_code}"] += 1
            if response.status_code == 200:
                if step == "infer":
                    assert cosine_rows(response.json()["text_embeddings"], expected).min() >= 0.9999
            elif response.status_code == 409 and not load_answered and step != "load":
                assert response.json()["error"]["code"] == "model_not_loaded", response.text
            else:
                assert refused_as_documented(response), (step, response.status_code, response.text)
    counts["churn cycles"] = full_cycles(log)
    return counts


def check_job(job: tuple, texts: list[str], library, log: str) -> Counter:
    done, rows = job
    assert done.status == "completed" and done.request_counts.completed == len(texts), done
    ids = [row["custom_id"] for row in rows]
    assert sorted(ids) == sorted(f"b{i}" for i in range(len(texts))), "a line missing or answered twice"
    chunks = re.findall(rf"bulk job {done.id}: chunk (\d+) done \((\d+) lines\)", log)
    assert sorted(int(chunk) for chunk, _ in chunks) == list(range(len(chunks))), "a chunk computed twice"
    assert sum(int(lines) for _, lines in chunks) == len(texts)
    vectors = np.asarray([row["response"]["body"]["data"][0]["embedding"] for row in rows])
    assert cosine_rows(vectors, library.encode([texts[int(i[1:])] for i in ids])).min() >= 0.9999
    return Counter({"bulk lines": len(rows), "bulk chunks": len(chunks)})


def assert_repository_as_listed(repository: Path, listing: list[dict]) -> None:
    """Every model directory in the repository is a part of a listed model; no staging left."""
    listed = {part for model in listing for part in model["triton_parts"]}
    on_disk = {entry.name for entry in repository.iterdir() if not entry.name.startswith(".")}
    assert on_disk <= listed, on_disk - listed
    staging = repository / ".staging"
    assert not staging.exists() or not any(staging.iterdir()), list(staging.iterdir())


def assert_nothing_left(server) -> None:
    workers = list(worker_pids(server).values())
    (triton_pid,) = server.children("tritonserver")
    stubs = stub_pids(server)
    assert server.stop() == 0
    gone = [*workers, triton_pid, *stubs]
    wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in gone), 30, "the server's processes gone")
    assert not processes_mentioning(str(server.repository)), "a process of the server is left"
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"embedgate_{server.process.pid}_")]
