"""embedgate as a Ray Serve application on a real (one-machine) Ray cluster: a head and
worker nodes from ``ray.cluster_utils.Cluster``, one replica per worker node, each
replica with its own real tritonserver, all reading one model repository.

The model repository is an S3 bucket of a ``moto_server`` on 127.0.0.1 (the AWS_*
variables reach the replicas through the Ray nodes' environment). The replicas are
deployed with ``embedgate serve --ray`` and used through Serve's HTTP proxy.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from ray.cluster_utils import Cluster

from tests.helpers import cosine_rows
from tests.s3 import S3Bucket

from .conftest import MINILM, free_port, processes, processes_mentioning

REPLICA = "x-embedgate-replica"
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}


@dataclass
class Deployment:
    cluster: object
    url: str
    dashboard_url: str
    bucket: S3Bucket
    # The bulk jobs' coordinator keeps its store here (the bucket holds the files).
    jobs_dir: Path

    def deploy(self, replicas: int) -> None:
        """``embedgate serve --ray`` against the running cluster (deploys, then returns)."""
        command = [
            sys.executable, "-m", "embedgate.api", "serve", "--ray",
            "--ray-address", self.cluster.address,
            "--ray-dashboard-url", self.dashboard_url,
            "--ray-replicas", str(replicas),
            "--ray-max-replicas-per-node", "1",
            "--ray-replica-cpus", "1",
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
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    def replicas(self) -> list[dict]:
        details = httpx.get(f"{self.dashboard_url}/api/serve/applications/", timeout=10).json()
        return details["applications"]["embedgate"]["deployments"]["EmbedGate"]["replicas"]

    def wait_replicas(self, count: int, timeout: float = 180.0) -> list[dict]:
        """Wait until ``count`` replicas run; them."""
        deadline = time.monotonic() + timeout
        while True:
            replicas = self.replicas()
            if len(replicas) == count and all(r["state"] == "RUNNING" for r in replicas):
                return replicas
            assert time.monotonic() < deadline, f"replicas: {[(r['replica_id'], r['state']) for r in replicas]}"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def ray_app(moto_server, tmp_path_factory):
    bucket = moto_server.new_bucket()
    with pytest.MonkeyPatch.context() as env:
        for name, value in bucket.env.items():
            env.setenv(name, value)  # inherited by the Ray nodes started below, and their replicas
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
        for _ in range(2):
            cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        app = Deployment(
            cluster,
            f"http://127.0.0.1:{free_port()}",
            f"http://127.0.0.1:{dashboard_port}",
            bucket,
            jobs_dir,
        )
        app.deploy(replicas=2)
        yield app
    finally:
        cluster.shutdown()


def embed_until_every_replica_answers(app: Deployment, text: str, replicas: int, timeout: float = 60.0) -> dict:
    """POST /infer until ``replicas`` different replicas have answered; their answers."""
    seen: dict[str, httpx.Response] = {}
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=app.url, timeout=60) as client:
        while len(seen) < replicas:
            assert time.monotonic() < deadline, f"only replicas {sorted(seen)} answered"
            response = client.post("/infer", json={"model_name": MINILM, "text": [text]})
            seen.setdefault(response.headers[REPLICA], response)
    return seen


def tritonservers() -> dict[int, int]:
    """pid -> parent pid of every running tritonserver."""
    return {pid: ppid for pid, comm, ppid in processes() if comm == "tritonserver"}


def test_a_model_loaded_once_is_served_by_every_replica_including_later_ones(ray_app, minilm):
    text = "one repository, many replicas"
    reference = minilm.encode([text])
    with httpx.Client(base_url=ray_app.url, timeout=600) as client:
        response = client.post("/load_sentence_transformer_model", json={"model_name": MINILM})
        assert response.status_code == 200, response.text
    # Converted once, into the shared repository.
    published = ray_app.bucket.keys("sentence-transformers--all-MiniLM-L6-v2")
    assert {"sentence-transformers--all-MiniLM-L6-v2/config.pbtxt", "sentence-transformers--all-MiniLM-L6-v2/1/model.onnx"} <= set(published)

    # Two replicas on two different nodes, identical embeddings, both the PyTorch model's.
    replicas = ray_app.wait_replicas(2)
    assert len({r["node_id"] for r in replicas}) == 2
    answers = embed_until_every_replica_answers(ray_app, text, 2)
    vectors = [np.asarray(r.json()["text_embeddings"]) for r in answers.values()]
    for vector in vectors:
        assert cosine_rows(vector, reference)[0] >= 0.9999
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)

    # A third node and a third replica: it serves the model without another load call.
    ray_app.cluster.add_node(**NODE)
    ray_app.deploy(replicas=3)
    assert len({r["node_id"] for r in ray_app.wait_replicas(3)}) == 3
    answers = embed_until_every_replica_answers(ray_app, text, 3)
    for replica_id, response in answers.items():
        assert response.status_code == 200, (replica_id, response.text)
        assert cosine_rows(response.json()["text_embeddings"], reference)[0] >= 0.9999


async def test_requests_keep_succeeding_when_one_replicas_triton_dies(ray_app, minilm):
    before = tritonservers()
    assert len(before) >= 2
    victim = next(iter(before))
    texts = [f"served while a triton dies {i}" for i in range(48)]

    async with httpx.AsyncClient(base_url=ray_app.url, timeout=60) as client:
        async def one(text: str) -> httpx.Response:
            await asyncio.sleep(0.05 * (hash(text) % 20))  # spread over the outage
            return await client.post("/infer", json={"model_name": MINILM, "text": [text]})

        in_flight = [asyncio.create_task(one(text)) for text in texts]
        await asyncio.sleep(0.3)
        os.kill(victim, signal.SIGKILL)
        responses = await asyncio.gather(*in_flight)

    for text, response in zip(texts, responses):
        assert response.status_code == 200, response.text
        assert cosine_rows(response.json()["text_embeddings"], minilm.encode([text]))[0] >= 0.9999
    assert len({r.headers[REPLICA] for r in responses}) >= 2
    # The replica's supervisor started a new tritonserver in place of the dead one.
    deadline = time.monotonic() + 60
    while victim in tritonservers() or len(tritonservers()) < len(before):
        assert time.monotonic() < deadline, "the killed tritonserver was not replaced"
        time.sleep(0.2)


def replica_processes() -> list[int]:
    """pids of the application's Serve replicas (Ray names their processes after them)."""
    return [pid for pid, comm, _ in processes() if "ServeReplica:embedgate" in comm] or [
        pid for pid in processes_mentioning("ServeReplica:embedgate:EmbedGate")
    ]


def test_a_batch_runs_on_every_replica_and_survives_one_dying(ray_app):
    count = 1500
    lines = [
        json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/embeddings",
                    "body": {"model": MINILM, "input": f"bulk text {i} " + "word " * (i % 30)}})
        for i in range(count)
    ]
    with openai.OpenAI(api_key="x", base_url=f"{ray_app.url}/v1", max_retries=2, timeout=60) as client:
        uploaded = client.files.create(file=("ray.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
        deadline = time.monotonic() + 180
        while client.batches.retrieve(batch.id).request_counts.completed < 300:
            assert time.monotonic() < deadline, "the batch did not start"
            time.sleep(0.1)
        replicas = replica_processes()
        assert len(replicas) >= 2, replicas
        os.kill(replicas[0], signal.SIGKILL)
        while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired"):
            assert time.monotonic() < deadline + 240, f"the batch did not finish: {batch.status}"
            time.sleep(0.2)
        assert batch.status == "completed" and batch.request_counts.completed == count, batch
        ids = [json.loads(row)["custom_id"] for row in client.files.content(batch.output_file_id).text.splitlines()]
    assert len(ids) == count and set(ids) == {f"r{i}" for i in range(count)}
    # Every replica's worker leased chunks from the one coordinator, the killed one's included.
    with sqlite3.connect(ray_app.jobs_dir / "jobs.sqlite3") as store:
        owners = store.execute(
            "SELECT COUNT(DISTINCT owner) FROM chunks WHERE batch_id = ? AND state = 'done'", (batch.id,)
        ).fetchone()[0]
    assert owners >= 2
    ray_app.wait_replicas(len(replicas))  # Serve replaced the dead replica


def test_unload_reaches_every_replica(ray_app):
    replicas = len(ray_app.replicas())
    with httpx.Client(base_url=ray_app.url, timeout=300) as client:
        response = client.post("/unload_model", json={"model_name": MINILM})
        assert response.status_code == 200, response.text
    answers = embed_until_every_replica_answers(ray_app, "gone everywhere", replicas)
    for replica_id, response in answers.items():
        assert response.status_code == 409, (replica_id, response.text)
        assert response.json()["error"]["code"] == "model_not_loaded"
