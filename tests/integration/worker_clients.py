"""Clients of a server of several gateway workers: one keep-alive connection per worker
(each worker says who it is in ``x-embedgate-worker``), steady clients pinned to each
worker, and the checks of what they were answered."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import time
from pathlib import Path

import httpx
import numpy as np

from tests.helpers import cosine_rows, free_port, words_of

from .conftest import MINILM, processes, processes_mentioning, start_gateway, wait_ready, wait_until_async
from .recovery import Clock

WORKERS = 2
WORKER = "x-embedgate-worker"


@contextlib.contextmanager
def workers_server(gateway, root: Path, **settings: str):
    """A server of ``WORKERS`` workers on a repository of its own under ``root``, MiniLM
    (the session's conversion, copied) restored at its start."""
    with gateway.client() as http:
        response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
        assert response.status_code == 200, response.text
    name = MINILM.replace("/", "--")
    shutil.copytree(gateway.repository / name, root / "repo" / name)
    server = start_gateway(root / "repo", root / "gateway.log", workers=str(WORKERS), preload_models=MINILM, **settings)
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


def two_workers(gateway, tmp_path_factory):
    """What a test module's ``served`` fixture yields: a server of two workers of its own.
    Bulk leases far longer than any test waits: a dead worker's chunks come back only
    because the primary gives them back at once."""
    with workers_server(gateway, tmp_path_factory.mktemp("workers"), batch_chunk_texts="50", batch_lease_s="600",
                        grpc_port=str(free_port())) as server:
        yield server


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
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
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


async def steady(
    url: str, what: str, answers: list, stop: asyncio.Event, per_worker: int = PER_WORKER, model: str = MINILM,
    clock: Clock | None = None,
) -> None:
    """``per_worker`` clients on each worker's connections (clients ``w * per_worker`` to
    ``(w + 1) * per_worker - 1`` on worker ``w``), each with one /infer of ``model`` always
    in flight (a text of its own each time: ``<words> <what> <client> <n>``); a request whose
    connection broke is recorded as such, and the client goes on (on a new connection).
    ``clock``: where each request's sending and answer are timed."""
    clock = clock or Clock()

    async def loop(client: httpx.AsyncClient, number: int) -> None:
        sent = 0
        try:
            while not stop.is_set():
                text = f"{words_of(what, number, sent)} {what} {number} {sent}"  # its own vector for a tiny model too
                sent += 1
                clock.send(text)
                try:
                    response = await client.post(
                        "/infer", json={"model_name": model, "text": [text]}, headers={"x-request-timeout": "300"}
                    )
                except httpx.TransportError as exc:
                    clock.answer(text)
                    answers.append((text, exc))
                    continue
                clock.answer(text)
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


def check_answers(answers: list, library) -> tuple[list, list]:
    """The answers that came, each 200 with its own text's vector (``library``, the model's
    SentenceTransformer); and the broken ones."""
    broken = [(text, a) for text, a in answers if isinstance(a, Exception)]
    came = [(text, a) for text, a in answers if not isinstance(a, Exception)]
    assert [a.status_code for _, a in came] == [200] * len(came), [a.text for _, a in came if a.status_code != 200][:5]
    served = np.asarray([a.json()["text_embeddings"][0] for _, a in came])
    assert cosine_rows(served, library.encode([text for text, _ in came])).min() >= 0.9999
    return came, broken


def resent_by_each_worker(log: str) -> None:
    """Each worker sent again a request that what was to answer it had lost (the lines its
    resend logs, ``api/compute/backend/resend.py``, under ``[worker N]``)."""
    for index in range(WORKERS):
        assert re.search(rf"\[worker {index}\]: .*sending it again", log), f"worker {index} sent nothing again"


def answered_by(answers: list, worker: str) -> int:
    return sum(1 for _, a in answers if not isinstance(a, Exception) and a.headers.get(WORKER) == worker)
