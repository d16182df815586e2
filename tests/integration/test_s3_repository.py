"""The model repository in S3: the real gateway and the real embedded tritonserver reading
a bucket of a real S3-compatible server (moto_server on 127.0.0.1), through HTTP.

One gateway converts a model (a tiny one the test builds: what is checked is where its
files go, not its size) into the bucket; a second one, with an empty cache, loads it from
there without converting; a delete through either removes it for both.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tests.helpers import cosine_rows
from tests.s3 import SECRET_ACCESS_KEY

from .conftest import start_gateway, wait_ready

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = "bucket/tiny"
TRITON_NAME = "bucket--tiny"
SENTENCES = ["A man is eating food.", "Models live in a bucket.", "short", "A much longer sentence " * 80]


def embed(http, texts=SENTENCES) -> np.ndarray:
    response = http.post("/infer", json={"model_name": MODEL, "text": texts})
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["text_embeddings"], dtype=np.float32)


def files_under(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


def in_process_baseline(repository: str, out: Path) -> dict:
    """benchmark.py's in-process baseline on the served ONNX file, read from the bucket."""
    command = [
        sys.executable, "benchmark.py", "--inprocess-only", "--requests", "4", "--model", MODEL,
        "--model-repository", repository, "--json", str(out),
    ]
    finished = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return json.loads(out.read_text())["inprocess"]


def assert_no_secret(gateway, http) -> None:
    assert SECRET_ACCESS_KEY not in gateway.log()
    for path in ("/metrics", "/metrics/prometheus", "/repository_models", "/loaded_models"):
        assert SECRET_ACCESS_KEY not in http.get(path).text


def test_one_bucket_two_gateways(s3_bucket, moto_server, tmp_path, tiny_dense):
    model_path, library = str(tiny_dense[0]), tiny_dense[1]
    first_cache, second_cache = tmp_path / "first-cache", tmp_path / "second-cache"
    first = start_gateway(s3_bucket.url, tmp_path / "first.log", repository_cache_dir=str(first_cache))
    second = None
    try:
        with first.client() as http:
            loaded = http.post("/load_sentence_transformer_model", json={"model_name": MODEL, "model_path": model_path})
            assert loaded.status_code == 200, loaded.text
            assert loaded.json()["converted"] is True
            served = embed(http)
            assert cosine_rows(served, library.encode(SENTENCES)).min() >= 0.9999

            # In the bucket, whole; in the gateway's cache, only what tokenizing needs.
            assert {
                f"{TRITON_NAME}/config.pbtxt", f"{TRITON_NAME}/1/model.onnx", f"{TRITON_NAME}/1/model.py",
                f"{TRITON_NAME}/metadata.json", f"{TRITON_NAME}/tokenizer/tokenizer.json", ".embedgate-loaded.json",
            } <= set(s3_bucket.keys())
            cached = [f for f in files_under(first_cache) if f"/{TRITON_NAME}/" in f]
            assert sorted(f.rsplit("/", 1)[-1] for f in cached) == ["metadata.json", "tokenizer.json", "tokenizer_config.json"]
            assert not any(f.endswith(".onnx") for f in files_under(first_cache)), cached

            # Triton dies: restarted, it downloads the model again into a fresh directory.
            (triton_pid,) = first.children("tritonserver")
            downloads = glob.glob(f"{tempfile.gettempdir()}/embedgate_{first.process.pid}_*s3-*")
            assert len(downloads) == 1 and any(Path(downloads[0]).rglob("model.onnx"))
            os.kill(triton_pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while http.post("/infer", json={"model_name": MODEL, "text": ["back"]}).status_code != 200:
                assert time.monotonic() < deadline, first.log()[-3000:]
                time.sleep(0.3)
            np.testing.assert_allclose(embed(http), served, atol=1e-5)
            assert not os.path.exists(downloads[0])

            assert http.post("/unload_model", json={"model_name": MODEL}).status_code == 200
            assert_no_secret(first, http)

        # A second gateway, its cache empty, Triton logging verbosely: the model is in the
        # bucket, so it loads without converting and gives the same embeddings.
        second = start_gateway(
            s3_bucket.url, tmp_path / "second.log", repository_cache_dir=str(second_cache),
            log_level="debug", triton_log_verbose="1",
        )
        wait_ready(second)
        with second.client() as http:
            listed = http.get("/repository_models").json()["models"]
            assert [(m["model_name"], m["loaded"]) for m in listed] == [(MODEL, False)]
            assert http.post("/infer", json={"model_name": MODEL, "text": ["x"]}).status_code == 409
            loaded = http.post("/load_sentence_transformer_model", json={"model_name": MODEL})
            assert loaded.status_code == 200, loaded.text
            assert (loaded.json()["status"], loaded.json()["converted"]) == ("loaded", False)
            np.testing.assert_allclose(embed(http), served, atol=1e-5)
            serves_while_the_bucket_is_unreachable(second, moto_server, library)
            assert not any(f.endswith(".onnx") for f in files_under(second_cache))
            baseline = in_process_baseline(s3_bucket.url, tmp_path / "bench.json")
            assert baseline["baselines"]["plain"]["texts"] == 4
            assert not os.path.exists(baseline["onnx_file"])  # downloaded for that run only

            deleted = http.post("/delete_model", json={"model_name": MODEL})
            assert deleted.status_code == 200, deleted.text
            assert not any(key.startswith(f"{TRITON_NAME}/") for key in s3_bucket.keys())
            assert http.get("/repository_models").json()["models"] == []
            assert http.post("/infer", json={"model_name": MODEL, "text": ["x"]}).status_code == 404
            assert_no_secret(second, http)
            assert "s3://" in second.log()  # Triton's verbose log did run, and named only the URL

        with first.client() as http:
            assert http.get("/repository_models").json()["models"] == []
    finally:
        for gateway in (first, second):
            if gateway is not None:
                gateway.stop()
    assert SECRET_ACCESS_KEY not in first.log() + second.log()
    assert glob.glob(f"{tempfile.gettempdir()}/embedgate_{first.process.pid}_*s3-*") == []


def serves_while_the_bucket_is_unreachable(gateway, moto_server, library) -> None:
    """The bucket's service stops answering (SIGSTOPped): a listing of the repository waits on
    it, and the loaded model answers meanwhile, with the library's vectors, since nothing
    reads the bucket per request; once the service is back, the listing answers."""

    def listing():
        with gateway.client(timeout=300) as client:
            return client.get("/repository_models")

    texts = ["served while the bucket is down", "nothing reads it per request"]
    os.kill(moto_server.process.pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(listing)
            time.sleep(0.5)  # the listing on its way to the stopped service
            with gateway.client(timeout=15) as http:
                assert cosine_rows(embed(http, texts), library.encode(texts)).min() >= 0.9999
            assert not waiting.done(), "the listing did not wait on the bucket"
            os.kill(moto_server.process.pid, signal.SIGCONT)
            assert waiting.result().status_code == 200
    finally:
        os.kill(moto_server.process.pid, signal.SIGCONT)


def test_a_bucket_that_cannot_be_read_stops_the_gateway_at_startup_saying_why(s3_bucket, tmp_path):
    missing = s3_bucket.url.replace(s3_bucket.name, "no-such-bucket")
    try:
        start_gateway(missing, tmp_path / "gateway.log", repository_cache_dir=str(tmp_path / "cache"))
    except RuntimeError as refused:
        message = str(refused)
    else:
        raise AssertionError("the gateway started on a bucket that does not exist")
    assert "exited during startup" in message and "NoSuchBucket" in message and missing in message
    assert SECRET_ACCESS_KEY not in (tmp_path / "gateway.log").read_text()
