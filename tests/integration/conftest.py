"""Start the real gateway (``embedgate serve``), which starts the real tritonserver.

Everything goes through HTTP on 127.0.0.1. One gateway and one model repository serve
the whole session; tests that need their own gateway start one with :func:`start_gateway`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import cosine_rows, free_port, words_of
from tests.run_shared import published_once

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_TRITON_NAME = "sentence-transformers--all-MiniLM-L6-v2"


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.integration)


@dataclass
class Gateway:
    url: str
    process: subprocess.Popen
    repository: Path
    log_path: Path

    def client(self, timeout: float = 600.0) -> httpx.Client:
        # Generous: a conversion on a loaded 2-core machine takes minutes; a hang still ends.
        return httpx.Client(base_url=self.url, timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def children(self, name: str) -> list[int]:
        """PIDs of this gateway's child processes called ``name``."""
        return [pid for pid, comm, ppid in processes() if ppid == self.process.pid and comm == name]

    def metric(self, name: str, headers: dict[str, str] | None = None, **labels: str) -> float:
        """The sum of the samples called ``name`` (with these labels) in /metrics/prometheus."""
        text = httpx.get(f"{self.url}/metrics/prometheus", headers=headers, timeout=30).text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def wait_log(self, pattern: str | re.Pattern[str], timeout: float = 120.0, after: int = 0) -> int:
        """Wait until ``pattern`` (text, or a regular expression) is in the log past offset
        ``after``; the offset where it ends."""
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
        try:
            found = wait_until(lambda: regex.search(self.log(), after), timeout, f"{regex.pattern!r} in the gateway log")
        except AssertionError as missing:
            # What the gateway did instead is what a failure needs.
            raise AssertionError(f"{missing}; the log since:\n{self.log()[after:][-4000:]}") from None
        return found.end()

    def stop(self, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise
        return self.process.returncode


def wait_until(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05):
    """Poll ``condition`` until it is true (returning it), or fail naming ``what``.

    Tests wait on the event they mean (a log line, a counter, a process, a state) with a
    generous timeout, never on a fixed sleep: on a loaded machine everything is slower.
    """
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"waited {timeout:.0f}s for {what}"
        time.sleep(interval)
    return value


async def wait_until_async(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05):
    """:func:`wait_until` for async tests: the condition runs in a thread, the loop goes on."""
    deadline = time.monotonic() + timeout
    while not (value := await asyncio.to_thread(condition)):
        assert time.monotonic() < deadline, f"waited {timeout:.0f}s for {what}"
        await asyncio.sleep(interval)
    return value


@contextlib.asynccontextmanager
async def steady_clients(url: str, what: str, clients: int = 8, model: str = MINILM):
    """``clients`` clients, each with one /infer of ``model`` always in flight (a text of its own
    each time), until the block ends; yields the (text, answer) list, growing as they are
    answered. Their deadline is longer than a Triton restart on a loaded machine (a restart
    can meet a hung stub handshake, or Triton aborting again, and take minutes): a request
    sent again after a restart is what the tests around a dying Triton look at."""
    answers: list[tuple[str, httpx.Response]] = []
    stop = asyncio.Event()
    deadline = {"x-request-timeout": "300"}  # the most a client may ask for

    async def client_loop(client: httpx.AsyncClient, number: int) -> None:
        sent = 0
        while not stop.is_set():
            text = f"{words_of(what, number, sent)} {what} {number} {sent}"  # its own vector for a tiny model too
            answer = await client.post("/infer", json={"model_name": model, "text": [text]}, headers=deadline)
            answers.append((text, answer))
            sent += 1

    async with httpx.AsyncClient(base_url=url, timeout=360) as client:
        loops = [asyncio.create_task(client_loop(client, n)) for n in range(clients)]
        try:
            yield answers
        finally:
            stop.set()
            await asyncio.gather(*loops)


def assert_each_got_its_embedding(answers: list[tuple[str, httpx.Response]], minilm) -> None:
    """Every answer is 200 with the PyTorch model's embedding of its own text."""
    statuses = [response.status_code for _, response in answers]
    assert statuses == [200] * len(answers), [r.text for _, r in answers if r.status_code != 200][:5]
    served = np.asarray([response.json()["text_embeddings"][0] for _, response in answers])
    assert cosine_rows(served, minilm.encode([text for text, _ in answers])).min() >= 0.9999


def processes() -> list[tuple[int, str, int]]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        found.append((int(entry), comm, ppid))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie has ended (it waits only for whoever adopted it, here
    the container's init, to read its exit status)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def model_stubs(triton_pid: int, triton_name: str) -> list[int]:
    """The stubs of this tritonserver that run instances of ``triton_name``."""
    found = []
    for pid, _, ppid in processes():
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if ppid == triton_pid and args[0].endswith(b"triton_python_backend_stub") and f"{triton_name}_0_".encode() in b" ".join(args):
            found.append(pid)
    return found


def established_on(pid: int, port: int) -> int:
    """Connections process ``pid`` holds that were accepted on ``port`` (/proc's TCP tables)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for pid, _, _ in processes():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            pids.append(pid)
    return pids


class GatewayPortTaken(RuntimeError):
    """The gateway exited at startup: its port was taken."""


GATEWAY_PORT_TRIES = 3


def start_gateway(
    repository: Path,
    log_path: Path,
    *,
    command: list[str] | None = None,
    cwd: Path | None = None,
    port: int | None = None,
    env: dict[str, str | None] | None = None,
    **settings: str,
) -> Gateway:
    """A gateway on ``port`` (default: a free one): ``python -m embedgate.api serve`` of this
    environment, or ``command`` (another installation's ``embedgate serve``); ``env``: other
    environment variables of its own (None: left out of it). The gateway
    binds its port once Triton runs, seconds after the port was found free: where another
    process took it meanwhile (an outgoing connection's port comes from the same range), a
    port of the test's choosing is chosen again."""
    for _ in range(GATEWAY_PORT_TRIES - 1):
        try:
            return _start_gateway(repository, log_path, command, cwd, port or free_port(), settings, env)
        except GatewayPortTaken:
            if port is not None:
                raise
    return _start_gateway(repository, log_path, command, cwd, port or free_port(), settings, env)


def _start_gateway(
    repository: Path,
    log_path: Path,
    command: list[str] | None,
    cwd: Path | None,
    port: int,
    settings: dict[str, str],
    own_env: dict[str, str | None] | None = None,
) -> Gateway:
    env = dict(os.environ)
    env.update(
        {
            "EMBEDGATE_PORT": str(port),
            "EMBEDGATE_MODEL_REPOSITORY": str(repository),
            "EMBEDGATE_LOG_LEVEL": "info",
            "HF_HUB_OFFLINE": "1",
        }
    )
    env.update({f"EMBEDGATE_{k.upper()}": v for k, v in settings.items()})
    for name, value in (own_env or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    log = open(log_path, "wb")
    process = subprocess.Popen(
        command or [sys.executable, "-m", "embedgate.api", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd
    )
    gateway = Gateway(f"http://127.0.0.1:{port}", process, repository, log_path)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = gateway.log()[-4000:]
            failure = GatewayPortTaken if f"('127.0.0.1', {port}): address already in use" in said else RuntimeError
            raise failure(f"gateway exited during startup:\n{said}")
        try:
            if httpx.get(f"{gateway.url}/health", timeout=1).status_code == 200:
                return gateway
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    gateway.stop()
    raise RuntimeError(f"gateway did not start:\n{gateway.log()[-4000:]}")


def wait_ready(gateway: Gateway, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if httpx.get(f"{gateway.url}/health/ready", timeout=2).status_code == 200:
            return
        time.sleep(0.1)
    raise AssertionError(f"gateway not ready in {timeout}s:\n{gateway.log()[-3000:]}")


@contextlib.contextmanager
def models_loaded(gateway: Gateway, directories: dict[str, Path]):
    """Each model (name -> its directory) loaded through the API, and deleted afterwards:
    other tests count the loaded models. Yields the load answers."""
    with gateway.client(timeout=600) as http:
        answers = {}
        for name, directory in directories.items():
            response = http.post("/load_sentence_transformer_model", json={"model_name": name, "model_path": str(directory)})
            assert response.status_code == 200, response.text
            answers[name] = response.json()
        yield answers
        for name in directories:
            assert http.post("/delete_model", json={"model_name": name}).status_code == 200


def run_batch(gateway: Gateway, lines: list[str], endpoint: str) -> tuple[object, dict[str, dict], list[dict]]:
    """A bulk job of ``lines`` (JSONL requests) run to its end through OpenAI's client: the
    batch, its output lines by custom_id, its error lines."""
    import io
    import json

    import openai

    with openai.OpenAI(api_key="x", base_url=f"{gateway.url}/v1", max_retries=0, timeout=60) as client:
        uploaded = client.files.create(file=("lines.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")
        deadline = time.monotonic() + 120
        while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
            assert time.monotonic() < deadline, f"batch {batch.id} still {batch.status}"
            time.sleep(0.2)

        def read(file_id: str | None) -> list[dict]:
            return [json.loads(row) for row in client.files.content(file_id).text.splitlines()] if file_id else []

        output = {row["custom_id"]: row for row in read(batch.output_file_id)}
        return batch, output, read(batch.error_file_id)


def assert_reranked_as_online(http: httpx.Client, bodies: list[dict], output: dict[str, dict]) -> None:
    """Each rerank line (custom_id ``q<i>``, ``bodies[i]``) answered as /v1/rerank answers it."""
    for i, body in enumerate(bodies):
        online = http.post("/v1/rerank", json=body).json()
        answer = output[f"q{i}"]["response"]["body"]
        assert [r["index"] for r in answer["results"]] == [r["index"] for r in online["results"]]
        np.testing.assert_allclose([r["relevance_score"] for r in answer["results"]],
                                   [r["relevance_score"] for r in online["results"]], atol=1e-5)
        assert answer["usage"] == online["usage"]


@pytest.fixture(scope="session")
def repository(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model_repository")


@pytest.fixture(scope="session")
def clip_configs(tmp_path_factory) -> Path:
    """Where the session gateway finds the tiny CLIP's architecture (tests/clip_model.py)."""
    from tests.clip_model import write_tiny_clip_config

    return write_tiny_clip_config(tmp_path_factory.mktemp("clip-configs"))


@pytest.fixture(scope="session")
def gateway(repository, clip_configs, tmp_path_factory):
    # Its warm converter kept for the whole session: conversions come minutes apart, and
    # each start of one imports the conversion libraries again.
    gw = start_gateway(
        repository, tmp_path_factory.mktemp("logs") / "gateway.log",
        converter_warm_s="3600", clip_model_config_dir=str(clip_configs),
    )
    yield gw
    gw.stop()


@pytest.fixture
def http(gateway):
    with gateway.client() as client:
        yield client


@pytest.fixture(scope="module")
def tiny_dense(tmp_path_factory) -> tuple[Path, object]:
    """A tiny dense sentence-transformer's directory (a conversion of seconds), and the
    library's own model of it: for tests of what is done with a model, not of its numbers."""
    from sentence_transformers import SentenceTransformer

    from tests import tiny_models

    directory = tiny_models.dense_model(tmp_path_factory.mktemp("tiny") / "model", seed=21)
    return directory, SentenceTransformer(str(directory), device="cpu")


@pytest.fixture(scope="session")
def minilm_published(gateway, run_dir) -> None:
    """MiniLM in the session repository: converted by the session gateway of the first
    process of the run that needs it, copied by the others (``tests/run_shared.py``)."""

    def convert() -> None:
        with gateway.client() as http:
            response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
            assert response.status_code == 200, response.text

    published_once(run_dir, MINILM_TRITON_NAME, gateway.repository, convert)


@pytest.fixture
def minilm_loaded(http, minilm_published):
    """MiniLM published (converted once in the run) and loaded."""
    response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
    assert response.status_code == 200, response.text
    return response.json()
