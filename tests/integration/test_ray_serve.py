"""embedgate as a Ray Serve application on a real (one-machine) Ray cluster: a head and
worker nodes from ``ray.cluster_utils.Cluster``, one replica per worker node, each
replica with its own real tritonserver, all reading one model repository.

The model is a tiny one the test builds (what is checked is how replicas share and serve
it, not its size), compared with the library's own vectors of it. The model repository is
an S3 bucket of a ``moto_server`` on 127.0.0.1 (the AWS_* variables reach the replicas
through the Ray nodes' environment). The replicas are deployed with ``embedgate serve
--ray`` and used through Serve's HTTP proxy (and TEI's gRPC API, which every replica serves
on the application's gRPC port), with loads on a first request on: a test that means a
replica served what the desired state gave it checks that no answer waited for a load.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from ray.cluster_utils import Cluster
from ray.util.state import list_actors

from tests.helpers import cosine_rows, words_of
from tests.s3 import S3Bucket

from .conftest import (
    assert_each_got_its_embedding,
    established_on,
    free_port,
    processes,
    steady_clients,
    wait_until,
    wait_until_async,
)
from .grpc_clients import embedded_on_connections
from .recovery import Clock, recovered

REPLICA = "x-embedgate-replica"
LOAD_HEADER = "x-model-load-time-ms"
MODEL = "ray/tiny"
TRITON_NAME = "ray--tiny"
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
# From a worker node's loss to the first 200 after which nothing failed (the survivor serving
# alone), measured 0.1-1.9 s on 2 cores beside other test runs; the bound leaves room for more load.
NODE_LOSS_BOUND_S = 30.0
# The replicas' EMBEDGATE_TRITON_STARTUP_TIMEOUT_S: past it, a replica whose tritonserver is
# not ready fails Serve's health check (every HEALTH_CHECK_PERIOD_S) and, three failures on,
# is replaced. Shorter than the defaults (60 s, 5 s) so the test waits less; a replica's
# tritonserver (no model loaded at its start) is ready in well under a second.
STARTUP_TIMEOUT_S = 10.0
HEALTH_CHECK_PERIOD_S = 2.0


@dataclass
class Deployment:
    cluster: object
    url: str
    dashboard_url: str
    bucket: S3Bucket
    # The bulk jobs' coordinator keeps its store here (the bucket holds the files).
    jobs_dir: Path
    # TEI's gRPC API of every replica (on this one-machine cluster, one port they share).
    grpc_port: int

    def deploy(self, replicas: int) -> None:
        """``embedgate serve --ray`` against the running cluster (deploys, then returns)."""
        command = [
            sys.executable, "-m", "embedgate.api", "serve", "--ray",
            "--ray-address", self.cluster.address,
            "--ray-dashboard-url", self.dashboard_url,
            "--ray-replicas", str(replicas),
            "--ray-max-replicas-per-node", "1",
            "--ray-replica-cpus", "1",
            "--ray-health-check-period-s", str(HEALTH_CHECK_PERIOD_S),
            # One proxy: with one on every node, each would send everything to its own node's replica.
            "--ray-proxy-location", "HeadOnly",
            "--host", "127.0.0.1",
            "--port", self.url.rsplit(":", 1)[1],
            "--model-repository", self.bucket.url,
            "--instance-count", "1",
            "--jobs-dir", str(self.jobs_dir),
            # Small chunks: a short job still spreads over every replica.
            "--batch-chunk-texts", "25",
        ]
        env = {
            **os.environ, "HF_HUB_OFFLINE": "1", "EMBEDGATE_TRITON_STARTUP_TIMEOUT_S": str(STARTUP_TIMEOUT_S),
            "EMBEDGATE_LOAD_ON_FIRST_REQUEST": "true", "EMBEDGATE_GRPC_PORT": str(self.grpc_port),
        }
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    def replicas(self) -> list[dict]:
        details = httpx.get(f"{self.dashboard_url}/api/serve/applications/", timeout=10).json()
        return details["applications"]["embedgate"]["deployments"]["EmbedGate"]["replicas"]

    def wait_replicas(self, count: int, timeout: float = 600.0) -> list[dict]:
        """Wait until ``count`` replicas run; them."""
        deadline = time.monotonic() + timeout
        while True:
            replicas = self.replicas()
            if len(replicas) == count and all(r["state"] == "RUNNING" for r in replicas):
                return replicas
            assert time.monotonic() < deadline, f"replicas: {[(r['replica_id'], r['state']) for r in replicas]}"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def library(tiny_dense):
    """The library's model of what the replicas serve."""
    return tiny_dense[1]


@pytest.fixture(scope="module")
def ray_app(moto_server, tmp_path_factory):
    bucket = moto_server.new_bucket()
    with pytest.MonkeyPatch.context() as env:
        for name, value in bucket.env.items():
            env.setenv(name, value)  # inherited by the Ray nodes started below, and their replicas
        # Ray runs its workers (the replicas, and so their tritonservers) at nice 15: beside
        # any busy process at the default priority they would get a thirtieth of its CPU.
        # Here they compete for it as every other process of the test run does.
        env.setenv("RAY_worker_niceness", "0")
        # Serve kills a proxy that is not ready in 5 s, which a loaded 2-core machine can
        # take to start one: the deploy would fail for want of patience, not of a proxy.
        env.setenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
        yield from _ray_app(bucket, tmp_path_factory.mktemp("ray-jobs"))


def _ray_app(bucket: S3Bucket, jobs_dir: Path):
    dashboard_port = free_port()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **NODE,
            "num_cpus": 0,  # replicas go to the workers; Serve's controller and proxy need none
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": dashboard_port,
        },
    )
    try:
        cluster.add_node(**NODE)  # the first test adds a second
        cluster.wait_for_nodes()
        app = Deployment(
            cluster,
            f"http://127.0.0.1:{free_port()}",
            f"http://127.0.0.1:{dashboard_port}",
            bucket,
            jobs_dir,
            free_port(),
        )
        app.deploy(replicas=1)
        yield app
    finally:
        cluster.shutdown()


def embed_until_every_replica_answers(app: Deployment, text: str, replicas: int, timeout: float = 300.0) -> dict:
    """POST /infer until ``replicas`` different replicas have answered; their answers."""
    seen: dict[str, httpx.Response] = {}
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=app.url, timeout=60) as client:
        while len(seen) < replicas:
            assert time.monotonic() < deadline, f"only replicas {sorted(seen)} answered"
            response = client.post("/infer", json={"model_name": MODEL, "text": [text]})
            seen.setdefault(response.headers[REPLICA], response)
    return seen


def tritonservers() -> dict[int, int]:
    """pid -> parent pid of every running tritonserver."""
    return {pid: ppid for pid, comm, ppid in processes() if comm == "tritonserver"}


def test_a_model_loaded_once_is_served_by_every_replica_including_later_ones(ray_app, tiny_dense):
    directory, library = tiny_dense
    text = "one repository, many replicas"
    reference = library.encode([text])
    with httpx.Client(base_url=ray_app.url, timeout=600) as client:
        response = client.post("/load_sentence_transformer_model", json={"model_name": MODEL, "model_path": str(directory)})
        assert response.status_code == 200, response.text
    # Converted once, into the shared repository.
    published = ray_app.bucket.keys(TRITON_NAME)
    assert {f"{TRITON_NAME}/config.pbtxt", f"{TRITON_NAME}/1/model.onnx"} <= set(published)
    as_converted = stored(ray_app.bucket, TRITON_NAME)

    (first,) = ray_app.wait_replicas(1)
    answers = embed_until_every_replica_answers(ray_app, text, 1)
    assert cosine_rows(answers[first["replica_id"]].json()["text_embeddings"], reference)[0] >= 0.9999

    # A second node and a second replica: it serves the model without another load call,
    # and gives the same embeddings.
    ray_app.cluster.add_node(**NODE)
    ray_app.deploy(replicas=2)
    replicas = ray_app.wait_replicas(2)
    assert len({r["node_id"] for r in replicas}) == 2
    answers = embed_until_every_replica_answers(ray_app, text, 2)
    vectors = []
    for replica_id, response in answers.items():
        assert response.status_code == 200, (replica_id, response.text)
        vectors.append(np.asarray(response.json()["text_embeddings"]))
        assert cosine_rows(vectors[-1], reference)[0] >= 0.9999
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)
    # The second replica loaded the first one's conversion: not one object of it written again.
    assert stored(ray_app.bucket, TRITON_NAME) == as_converted


def test_every_replica_serves_teis_grpc_api_on_the_applications_port(ray_app, library):
    """Each replica serves TEI's gRPC API on the application's gRPC port (the replicas of this
    one-machine cluster share it, SO_REUSEPORT): new connections land on every replica, and
    each answers with the library's vectors."""
    replicas = ray_app.wait_replicas(len(ray_app.replicas()))
    assert len(replicas) >= 2, replicas
    texts = [f"over gRPC, connection {index} of the replicas" for index in range(16)]
    with embedded_on_connections(ray_app.grpc_port, texts, MODEL) as vectors:
        assert cosine_rows(vectors, library.encode(texts)).min() >= 0.9999
        # Sixteen connections, each accepted by one replica: all on one would be a 1-in-32,768 chance.
        accepted = {replica["replica_id"]: established_on(replica["pid"], ray_app.grpc_port) for replica in replicas}
        assert sum(accepted.values()) == len(texts) and all(accepted.values()), accepted


def stored(bucket: S3Bucket, under: str) -> dict[str, tuple[str, object]]:
    """Each object under ``under``: its ETag and when it was written."""
    client = bucket.client()
    found = {}
    for key in bucket.keys(under):
        head = client.head_object(Bucket=bucket.name, Key=f"{bucket.prefix}/{key}")
        found[key] = (head["ETag"], head["LastModified"])
    return found


def replica_log(app: Deployment, replica: dict) -> str:
    """The replica's own output (the gateway's log lines), from the cluster's session logs."""
    logs = Path(app.cluster.head_node.get_logs_dir_path())
    (path,) = logs.glob(f"worker-{replica['worker_id']}-*-{replica['pid']}.err")
    return path.read_text(errors="replace")


def tritonserver_of(replica: dict) -> list[int]:
    """The tritonserver a replica started: its child, whatever else runs on the machine."""
    return [pid for pid, parent in tritonservers().items() if parent == replica["pid"]]


async def test_requests_keep_succeeding_when_one_replicas_triton_dies(ray_app, library):
    owner = ray_app.wait_replicas(len(ray_app.replicas()))[0]
    # Chosen by its parent: other gateways on the machine (the session's, another test
    # run's) have tritonservers too, and their supervisors would replace them as well.
    (victim,) = tritonserver_of(owner)
    log_start = len(replica_log(ray_app, owner))
    def answered_by_owner(since: int = 0) -> int:
        return sum(1 for _, response in answers[since:] if response.headers.get(REPLICA) == owner["replica_id"])

    async with steady_clients(ray_app.url, "served while a triton dies", model=MODEL) as answers:
        await wait_until_async(lambda: answered_by_owner() >= 2, 600, "the replica to serve")
        os.kill(victim, signal.SIGKILL)
        restarted = "tritonserver restarted in"
        await wait_until_async(lambda: restarted in replica_log(ray_app, owner)[log_start:], 600, "its restart")
        since = len(answers)
        await wait_until_async(lambda: answered_by_owner(since) >= 2, 600, "the replica to serve again")

    assert_each_got_its_embedding(answers, library)
    assert len({r.headers[REPLICA] for _, r in answers}) >= 2
    # The killed tritonserver was this replica's: its supervisor saw it die, sent a request
    # that was on it again, and started the one that runs now.
    log = replica_log(ray_app, owner)[log_start:]
    assert "tritonserver exited unexpectedly" in log
    assert "triton restarted under a request; sending it again" in log
    (replacement,) = tritonserver_of(owner)
    assert replacement != victim


def test_a_replica_whose_triton_stays_down_past_the_startup_timeout_is_replaced_by_one_that_serves_at_once(
    ray_app, library
):
    """A replica alive but without a tritonserver that answers (stopped: it neither exits,
    which the supervisor would restart, nor gets ready) fails Serve's health check once the
    startup timeout has passed, and Serve replaces it; the successor serves the model
    without a load call. (A replica that dies outright is replaced too: the node loss.)"""
    replicas = ray_app.wait_replicas(len(ray_app.replicas()))
    stuck = replicas[0]
    (its_triton,) = tritonserver_of(stuck)
    os.kill(its_triton, signal.SIGSTOP)
    stopped = time.monotonic()

    def replaced() -> list[dict]:
        now = ray_app.replicas()
        ids = {r["replica_id"] for r in now}
        running = len(now) == len(replicas) and all(r["state"] == "RUNNING" for r in now)
        return now if running and stuck["replica_id"] not in ids else []

    try:
        (successor,) = [r for r in wait_until(replaced, 600, "Serve to replace the replica") if r not in replicas]
        # Not before the timeout: a tritonserver restarting is waited for, not replaced.
        assert time.monotonic() - stopped > STARTUP_TIMEOUT_S
        # The replaced replica's tritonserver went with it, stopped as it was; the successor has its own.
        wait_until(lambda: its_triton not in tritonservers(), 120, "the replaced replica's tritonserver to exit")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(its_triton, signal.SIGCONT)
    assert len(tritonserver_of(successor)) == 1
    text = "served by a replica that never saw the load"
    answers = embed_until_every_replica_answers(ray_app, text, len(replicas))
    assert successor["replica_id"] in answers
    for replica_id, response in answers.items():
        assert response.status_code == 200, (replica_id, response.text)
        assert LOAD_HEADER not in response.headers, "the successor loaded the model for a request"
        assert cosine_rows(response.json()["text_embeddings"], library.encode([text]))[0] >= 0.9999


def done_by(app: Deployment, batch_id: str, store_file: Path | None = None) -> dict[int, int]:
    """Chunks of the batch done so far, by the pid of the gateway that did them (in the
    coordinator's store, or in ``store_file``)."""
    with sqlite3.connect(store_file or app.jobs_dir / "jobs.sqlite3") as store:
        rows = store.execute(
            "SELECT owner, COUNT(*) FROM chunks WHERE batch_id = ? AND state = 'done' GROUP BY owner", (batch_id,)
        ).fetchall()
    done: dict[int, int] = {}
    for owner, chunks in rows:
        pid = int(owner.split(":")[1])
        done[pid] = done.get(pid, 0) + chunks
    return done


def coordinator_pid(app: Deployment) -> int:
    """The process of this cluster's coordinator actor, asked of its state API: another Ray
    cluster on the machine (the image tests' node) runs a coordinator of its own."""
    (actor,) = list_actors(
        address=app.dashboard_url, filters=[("class_name", "=", "JobCoordinator"), ("state", "=", "ALIVE")]
    )
    return actor.pid


def test_a_batch_runs_on_every_replica_and_survives_one_dying_and_the_coordinators_node_lost(ray_app, library):
    """A replica is SIGKILLed mid-job, then the coordinator actor too, its store lost with
    it (as with its node): Ray starts the actor again, it takes the copy of the store kept
    in the bucket, and the job ends with every custom_id once, each the library's vector."""
    count = 3000
    # Texts of the tiny model's words, each its own vector (a line answered with another's fails).
    texts = [f"{words_of('bulk', i)} " + "text " * (i % 30) for i in range(count)]
    lines = [
        json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/embeddings",
                    "body": {"model": MODEL, "input": text}})
        for i, text in enumerate(texts)
    ]
    with openai.OpenAI(api_key="x", base_url=f"{ray_app.url}/v1", max_retries=2, timeout=60) as client:
        uploaded = client.files.create(file=("ray.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
        replicas = ray_app.wait_replicas(len(ray_app.replicas()))
        assert len(replicas) >= 2, replicas
        pids = {replica["pid"] for replica in replicas}
        # Killed once every replica has done some of it: the killed one's chunks stay done.
        wait_until(lambda: pids <= set(done_by(ray_app, batch.id)), 600, "every replica to do a chunk", 0.05)
        os.kill(replicas[0]["pid"], signal.SIGKILL)
        assert sum(done_by(ray_app, batch.id).values()) < count // 25, "the batch ended before a replica died"
        # The copy in the bucket follows each chunk recorded (uploaded after it): once it holds
        # every replica's chunks, the coordinator's node is lost: its store goes, and the actor with it.
        copy = ray_app.jobs_dir.parent / "bucket-copy.sqlite3"

        def copied() -> dict[int, int]:
            (key,) = [key for key in ray_app.bucket.keys() if key.endswith("state/jobs.sqlite3")]
            ray_app.bucket.client().download_file(ray_app.bucket.name, f"{ray_app.bucket.prefix}/{key}", str(copy))
            return done_by(ray_app, batch.id, copy)

        wait_until(lambda: pids <= set(copied()), 120, "the bucket's copy to hold every replica's chunks", 0.1)
        coordinator = coordinator_pid(ray_app)
        for path in ray_app.jobs_dir.glob("jobs.sqlite3*"):
            path.unlink()
        os.kill(coordinator, signal.SIGKILL)
        finished = ("completed", "failed", "expired")
        batch = wait_until(
            lambda: (b := client.batches.retrieve(batch.id)).status in finished and b, 900, "the batch to finish", 0.2
        )
        assert batch.status == "completed" and batch.request_counts.completed == count, (
            batch.status, batch.request_counts, batch.errors)
        rows = [json.loads(row) for row in client.files.content(batch.output_file_id).text.splitlines()]
    ids = [row["custom_id"] for row in rows]
    assert len(ids) == count and set(ids) == {f"r{i}" for i in range(count)}
    # Every line's vector, the killed replica's chunks and the others' alike, is the library's.
    vectors = np.asarray([row["response"]["body"]["data"][0]["embedding"] for row in rows])
    expected = library.encode([texts[int(custom_id[1:])] for custom_id in ids], batch_size=256)
    assert cosine_rows(vectors, expected).min() >= 0.9999
    # Every replica's chunk runner leased chunks from the one coordinator, the killed one's included.
    with sqlite3.connect(ray_app.jobs_dir / "jobs.sqlite3") as store:
        owners = store.execute(
            "SELECT COUNT(DISTINCT owner) FROM chunks WHERE batch_id = ? AND state = 'done'", (batch.id,)
        ).fetchone()[0]
    assert owners >= 2
    ray_app.wait_replicas(len(replicas))  # Serve replaced the dead replica


async def test_a_node_lost_under_load_leaves_the_other_replica_serving_and_a_new_node_serves_at_once(ray_app, library):
    """A worker node lost (its raylet and every process of it SIGKILLed) while clients send
    steadily: the other replica goes on serving within ``NODE_LOSS_BOUND_S``, only a request
    that was on the lost replica fails (one per client at most), the node's tritonserver goes
    with it, and a replica on a new node serves the model before it takes requests (no load
    call): the clients, sending on through its start, are never answered otherwise."""
    replicas = ray_app.wait_replicas(len(ray_app.replicas()))
    assert len(replicas) >= 2, replicas
    lost, survivor = replicas[0], replicas[1]
    (node,) = [n for n in ray_app.cluster.worker_nodes if n.node_id == lost["node_id"]]
    (its_triton,) = tritonserver_of(lost)
    answers: list[tuple[str, httpx.Response | Exception]] = []
    clock = Clock()
    stop = asyncio.Event()

    async def client_loop(client: httpx.AsyncClient, number: int) -> None:
        sent = 0
        while not stop.is_set():
            text = f"{words_of('node lost', number, sent)} node lost {number} {sent}"
            sent += 1
            clock.send(text)
            try:
                answer = await client.post("/infer", json={"model_name": MODEL, "text": [text]})
            except httpx.TransportError as error:  # the connection, not an HTTP answer
                answer = error
            clock.answer(text)
            answers.append((text, answer))

    def answered_by(replica: dict, since: int = 0) -> int:
        return sum(
            1 for _, r in answers[since:] if not isinstance(r, Exception) and r.headers.get(REPLICA) == replica["replica_id"]
        )

    def replaced() -> list[dict]:
        now = ray_app.replicas()
        running = len(now) == len(replicas) and all(r["state"] == "RUNNING" for r in now)
        return now if running and lost["replica_id"] not in {r["replica_id"] for r in now} else []

    async with httpx.AsyncClient(base_url=ray_app.url, timeout=120) as client:
        loops = [asyncio.create_task(client_loop(client, n)) for n in range(4)]
        try:
            await wait_until_async(lambda: answered_by(lost) >= 2 and answered_by(survivor) >= 2, 600, "both replicas to serve")
            lost_at = time.monotonic()
            await asyncio.to_thread(ray_app.cluster.remove_node, node, False)
            # Its worker processes notice their raylet is gone and end soon after it.
            await wait_until_async(lambda: not Path(f"/proc/{lost['pid']}").exists(), 120, "the lost replica to end")
            since = len(answers)
            await wait_until_async(lambda: answered_by(survivor, since) >= 20, 600, "the survivor to serve on")
            await asyncio.to_thread(wait_until, lambda: its_triton not in tritonservers(), 120,
                                    "the lost node's tritonserver to exit")
            window_closed = time.monotonic()

            # A node comes back: Serve places the missing replica on it, and it serves at once.
            # (Started on this thread, the one Ray's node start sets signal handlers from: the
            # clients wait that long, and send on through the replica's start.)
            ray_app.cluster.add_node(**NODE)
            (successor,) = [r for r in await asyncio.to_thread(wait_until, replaced, 600, "a replica on the new node")
                            if r["replica_id"] not in {x["replica_id"] for x in replicas}]
            await wait_until_async(lambda: answered_by(successor) >= 4, 300, "the new replica to serve")
        finally:
            stop.set()
            await asyncio.gather(*loops)
    assert successor["node_id"] != lost["node_id"]

    # Serve's proxy answers a request whose replica died under it with its own 500 (it does
    # not send it to another replica): one a client retries (the OpenAI client does). Those,
    # and broken connections, only for requests sent while the node was lost (one sent just
    # before its tritonserver exited may be answered after): one per client at most.
    failed = [
        (text, a) for text, a in answers if isinstance(a, Exception) or a.status_code != 200
    ]
    for text, answer in failed:
        if not isinstance(answer, Exception):
            assert (answer.status_code, answer.text) == (500, "Internal Server Error"), answer.text
        assert clock.answered[text] >= lost_at and clock.sent[text] < window_closed, (text, answer)
    per_client = Counter(int(text.split()[-2]) for text, _ in failed)
    assert max(per_client.values(), default=0) <= 1, failed
    served = [(text, r) for text, r in answers if not isinstance(r, Exception) and r.status_code == 200]
    assert_each_got_its_embedding(served, library)
    assert not [r for _, r in served if LOAD_HEADER in r.headers], "a replica loaded the model for a request"
    recovery = recovered(answers, clock, "a worker node lost", lost_at)
    by_successor = answered_by(successor)
    print(f"\nnode lost: {len(served)} answered 200 ({answered_by(lost)} by the lost replica, {by_successor} by the "
          f"one on the new node), {len(failed)} failed {[answer for _, answer in failed]}; {recovery}")
    assert recovery.seconds <= NODE_LOSS_BOUND_S, recovery


def desired_models(app: Deployment) -> list[str]:
    """The application's desired state: the models admins loaded."""
    details = httpx.get(f"{app.dashboard_url}/api/serve/applications/", timeout=10).json()
    deployment = details["applications"]["embedgate"]["deployments"]["EmbedGate"]["deployment_config"]
    return deployment["user_config"]["models"]


def test_unload_reaches_every_replica_and_each_loads_the_model_again_for_a_request(ray_app, library):
    """An unload takes the model from the desired state and every replica; the next request
    each replica takes loads it from the bucket for itself (a replica Serve started during the
    change never saw it there), and the desired state stays the models admins loaded."""
    replicas = len(ray_app.replicas())
    with httpx.Client(base_url=ray_app.url, timeout=300) as client:
        response = client.post("/unload_model", json={"model_name": MODEL})
        assert response.status_code == 200, response.text
    assert MODEL not in desired_models(ray_app)
    text = "loaded again for this request"
    answers = embed_until_every_replica_answers(ray_app, text, replicas)
    for replica_id, response in answers.items():
        assert response.status_code == 200, (replica_id, response.text)
        assert float(response.headers[LOAD_HEADER]) > 0, replica_id  # it was unloaded there
        assert cosine_rows(response.json()["text_embeddings"], library.encode([text]))[0] >= 0.9999
    assert MODEL not in desired_models(ray_app)
