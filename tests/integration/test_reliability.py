"""Overload, deadlines, disconnects, faults, bad input and keys, on a real gateway with
tight limits (its own repository, so its Triton queue limit is written into the model)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.helpers import cosine_rows

from .conftest import MINILM, processes, start_gateway, wait_ready

USER = {"authorization": "Bearer user-key"}
ADMIN = {"authorization": "Bearer admin-key"}
LIMITS = dict(
    api_keys="user-key",
    admin_keys="admin-key",
    max_inflight_requests="8",
    triton_max_queue_size="2",
    max_request_bytes=str(4 * 1024 * 1024),
    # Triton's queue policy belongs to its dynamic batcher, which models the gateway
    # batches do not have (their calls never queue deep in Triton): keep it here.
    gateway_batching="false",
)


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    """A gateway with API keys, 8 requests in flight per model and a Triton queue of 2
    (Triton's dynamic batcher)."""
    root = tmp_path_factory.mktemp("strict")
    gateway = start_gateway(root / "repo", root / "gateway.log", **LIMITS)
    with gateway.client() as http:
        response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM}, headers=ADMIN)
        assert response.status_code == 200, response.text
    yield gateway
    gateway.stop()


def counts(gateway) -> tuple[int, int]:
    stats = httpx.get(f"{gateway.url}/metrics", headers=USER, timeout=10).json()["model_stats"]
    entry = next(s for s in stats if s["name"] == MINILM)
    return entry["inference_count"], entry["execution_count"]


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["status"] == status and error["message"]
    if code:
        assert error["code"] == code, error
    assert "Traceback" not in response.text
    return error


async def test_overload_is_refused_at_once_and_accepted_answers_stay_correct(strict, minilm):
    texts = [f"overload sentence {i} about subject {i % 11}" for i in range(96)]
    async with httpx.AsyncClient(base_url=strict.url, headers=USER, timeout=60) as client:
        responses = await asyncio.gather(
            *(client.post("/infer", json={"model_name": MINILM, "text": [t]}) for t in texts)
        )
    ok = [(t, r) for t, r in zip(texts, responses) if r.status_code == 200]
    rejected = [r for r in responses if r.status_code != 200]
    assert ok and rejected
    served = np.asarray([r.json()["text_embeddings"][0] for _, r in ok])
    assert cosine_rows(served, minilm.encode([t for t, _ in ok])).min() >= 0.9999
    messages = set()
    for response in rejected:
        error = assert_error(response, 503, "overloaded")
        assert response.headers["retry-after"]
        messages.add("in flight" if "in flight" in error["message"] else "queue")
    # Both guards fired: the gateway's in-flight bound and Triton's queue policy.
    assert messages == {"in flight", "queue"}, messages


async def test_readiness_answers_busy_while_saturated_and_stays_fast(gateway, minilm_loaded, tmp_path):
    # Two requests in flight saturate this gateway; the shared repository has MiniLM.
    small = start_gateway(gateway.repository, tmp_path / "small.log", max_inflight_requests="2")
    try:
        wait_ready(small)
        big = [f"saturating request {i} " + "word " * 200 for i in range(256)]
        async with httpx.AsyncClient(base_url=small.url, timeout=120) as client:
            # About 30 s of work each on a 2-core machine: a deadline of their own, so that
            # only readiness is measured here.
            slow = {"x-request-timeout": "120"}
            load = [
                asyncio.create_task(client.post("/infer", json={"model_name": MINILM, "text": big}, headers=slow))
                for _ in range(2)
            ]
            await asyncio.sleep(0.5)
            started = time.monotonic()
            ready = await client.get("/health/ready")
            elapsed = time.monotonic() - started
            answers = await asyncio.gather(*load)
            assert all(r.status_code == 200 for r in answers), [a.text[:300] for a in answers if a.status_code != 200]
            after = await client.get("/health/ready")
    finally:
        small.stop()
    assert ready.status_code == 503 and ready.json()["status"] == "busy"
    assert elapsed < 1.0, f"readiness took {elapsed:.2f}s while inference ran"
    assert after.json() == {"status": "ready"}


def test_a_request_past_its_deadline_gets_504(strict):
    texts = [f"deadline text {i} " + "token " * 100 for i in range(300)]
    response = httpx.post(
        f"{strict.url}/infer",
        json={"model_name": MINILM, "text": texts},
        headers={**USER, "x-request-timeout": "0.01"},
        timeout=30,
    )
    assert_error(response, 504, "deadline_exceeded")


async def test_a_client_that_disconnects_stops_costing_work(gateway, minilm_loaded):
    before, _ = counts(gateway)
    texts = [f"abandoned text {i} " + "token " * 240 for i in range(2048)]
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{gateway.url}/infer", json={"model_name": MINILM, "text": texts}, timeout=1.0)
    await asyncio.sleep(4)
    after, _ = counts(gateway)
    assert after - before < len(texts) // 2, f"{after - before} of {len(texts)} texts still embedded"
    assert "client disconnected" in gateway.log()
    assert httpx.get(f"{gateway.url}/health/ready", timeout=5).json() == {"status": "ready"}


async def test_bad_input_gets_clear_errors_while_everyone_else_is_served(strict, minilm):
    stop = asyncio.Event()
    good_statuses: list[int] = []

    async def good_client(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            response = await client.post("/infer", json={"model_name": MINILM, "text": ["a steady good request"]})
            good_statuses.append(response.status_code)
            if response.status_code == 200:
                assert cosine_rows(response.json()["text_embeddings"], minilm.encode(["a steady good request"]))[0] >= 0.9999

    url = "/infer"
    cases = [
        (dict(content=b'{"model_name": ', headers={"content-type": "application/json"}), 400, "malformed_json"),
        (dict(json={"model_name": MINILM, "text": [1, {"a": 2}]}), 422, "invalid_request"),
        (dict(json={"model_name": MINILM, "text": []}), 400, "bad_request"),
        (dict(json={"model_name": MINILM, "text": ["x"] * 2049}), 413, "too_many_inputs"),
        (dict(content=b'{"model_name": "a", "text": ["\xff\xfe"]}', headers={"content-type": "application/json"}), 400, "malformed_body"),
        (dict(json={"model_name": "nobody/nothing", "text": ["a"]}), 404, "model_not_found"),
        (dict(json={"model_name": "../../etc/passwd", "text": ["a"]}), 422, "invalid_model_name"),
        (dict(json={"model_name": "a b%00c", "text": ["a"]}), 422, "invalid_model_name"),
        (dict(content=b"x" * (5 * 1024 * 1024), headers={"content-type": "application/json"}), 413, "body_too_large"),
        (dict(content=b"model_name=x", headers={"content-type": "application/x-www-form-urlencoded"}), 415, "unsupported_media_type"),
        (dict(json={"model_name": MINILM, "text": ["a"]}, headers={"authorization": "Bearer wrong"}), 401, "unauthorized"),
    ]
    async with httpx.AsyncClient(base_url=strict.url, headers=USER, timeout=60) as client:
        good = [asyncio.create_task(good_client(client)) for _ in range(2)]
        for kwargs, status, code in cases:
            headers = {**USER, **kwargs.pop("headers", {})}
            assert_error(await client.post(url, headers=headers, **kwargs), status, code)
        long_text = "a very long text " * 400
        for _ in range(50):  # this gateway's tiny Triton queue may say 503: retry, as a client would
            truncated = await client.post(url, json={"model_name": MINILM, "text": [long_text, "short"]})
            if truncated.status_code != 503:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*good)
    assert truncated.status_code == 200 and truncated.headers["x-truncated-inputs"] == "1"
    # Others only ever see answers or this gateway's own overload limits, never a failure.
    assert set(good_statuses) <= {200, 503} and good_statuses.count(200) > 0


def test_keys_decide_who_may_do_what(strict):
    body = {"model_name": MINILM}
    assert_error(httpx.post(f"{strict.url}/unload_model", json=body, timeout=10), 401, "unauthorized")
    assert_error(httpx.post(f"{strict.url}/unload_model", json=body, headers=USER, timeout=10), 403, "forbidden")
    assert httpx.get(f"{strict.url}/health", timeout=5).status_code == 200
    assert_error(httpx.get(f"{strict.url}/metrics", timeout=5), 401, "unauthorized")
    refused = httpx.post(
        f"{strict.url}/load_sentence_transformer_model",
        json={"model_name": "local/remote-code", "model_path": "/tmp", "trust_remote_code": True},
        headers=ADMIN,
        timeout=10,
    )
    assert_error(refused, 403, "forbidden")


def converter_processes(gateway) -> list[int]:
    pids = []
    for pid, _, ppid in processes():
        if ppid != gateway.process.pid:
            continue
        try:
            if b"converters" in Path(f"/proc/{pid}/cmdline").read_bytes():
                pids.append(pid)
        except OSError:
            pass
    return pids


def assert_nothing_half_written(repository: Path, triton_name: str) -> None:
    assert not (repository / triton_name).exists()
    staging = repository / ".staging"
    assert not staging.exists() or not any(p.name.startswith(triton_name) for p in staging.iterdir())


async def test_a_conversion_killed_midway_leaves_nothing_and_serving_goes_on(strict, minilm_path):
    async with httpx.AsyncClient(base_url=strict.url, headers=ADMIN, timeout=120) as client:
        load = asyncio.create_task(
            client.post("/load_sentence_transformer_model", json={"model_name": "local/crash-me", "model_path": minilm_path})
        )
        deadline = time.monotonic() + 30
        while not (pids := converter_processes(strict)):
            assert time.monotonic() < deadline, "the conversion never started"
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.0)  # well into loading torch and the model
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        response = await load
        served = await client.post("/infer", json={"model_name": MINILM, "text": ["still serving"]})
    error = assert_error(response, 500, "conversion_crashed")
    assert "nothing was published" in error["message"]
    assert_nothing_half_written(strict.repository, "local--crash-me")
    assert served.status_code == 200


async def test_a_model_deleted_under_load_fails_cleanly_then_comes_back(strict, minilm):
    texts = [f"delete race {i}" for i in range(48)]
    async with httpx.AsyncClient(base_url=strict.url, headers=USER, timeout=60) as client:
        requests = [asyncio.create_task(client.post("/infer", json={"model_name": MINILM, "text": [t]})) for t in texts]
        await asyncio.sleep(0.05)
        deleted = await client.post("/delete_model", json={"model_name": MINILM}, headers=ADMIN)
        responses = await asyncio.gather(*requests)
    assert deleted.status_code == 200, deleted.text
    for text, response in zip(texts, responses):
        if response.status_code == 200:
            assert cosine_rows(response.json()["text_embeddings"], minilm.encode([text]))[0] >= 0.9999
        else:
            assert_error(response, response.status_code)
            assert response.status_code in (404, 409, 503)
    assert_error(httpx.post(f"{strict.url}/infer", json={"model_name": MINILM, "text": ["x"]}, headers=USER), 404)
    with strict.client() as http:
        again = http.post("/load_sentence_transformer_model", json={"model_name": MINILM}, headers=ADMIN)
        assert again.status_code == 200 and again.json()["converted"] is True


async def test_triton_killed_during_a_load_fails_the_load_and_recovers(strict, minilm):
    with strict.client() as http:
        assert http.post("/unload_model", json={"model_name": MINILM}, headers=ADMIN).status_code == 200
    (triton_pid,) = strict.children("tritonserver")
    async with httpx.AsyncClient(base_url=strict.url, headers=ADMIN, timeout=120) as client:
        load = asyncio.create_task(client.post("/load_sentence_transformer_model", json={"model_name": MINILM}))
        await asyncio.sleep(0.3)
        os.kill(triton_pid, signal.SIGKILL)
        failed = await load
        assert failed.status_code in (502, 503), failed.text
        assert_error(failed, failed.status_code)
        deadline = time.monotonic() + 60
        while True:
            again = await client.post("/load_sentence_transformer_model", json={"model_name": MINILM})
            if again.status_code == 200:
                break
            assert again.status_code == 503 and time.monotonic() < deadline, again.text
            await asyncio.sleep(0.5)
        served = await client.post("/infer", json={"model_name": MINILM, "text": ["after the crash"]}, headers=USER)
    assert cosine_rows(served.json()["text_embeddings"], minilm.encode(["after the crash"]))[0] >= 0.9999


def test_a_conversion_out_of_memory_is_a_clear_error(tmp_path, minilm_path):
    gateway = start_gateway(tmp_path / "repo", tmp_path / "gateway.log", conversion_memory_limit_mb="400")
    try:
        with gateway.client() as http:
            response = http.post(
                "/load_sentence_transformer_model", json={"model_name": "local/oom", "model_path": minilm_path}
            )
            assert_error(response, 500, "conversion_out_of_memory")
            assert http.get("/health").status_code == 200
    finally:
        gateway.stop()
    assert_nothing_half_written(tmp_path / "repo", "local--oom")


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount)], capture_output=True, text=True)
    assert done.returncode == 0, f"cannot mount a tmpfs for the disk-full test: {done.stderr}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_during_publish_is_507_and_leaves_nothing(small_disk, tmp_path):
    gateway = start_gateway(small_disk / "repo", tmp_path / "gateway.log")
    try:
        with gateway.client() as http:
            response = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
            assert_error(response, 507, "insufficient_storage")
            assert http.get("/health/ready").json() == {"status": "ready"}
    finally:
        gateway.stop()
    assert_nothing_half_written(small_disk / "repo", "sentence-transformers--all-MiniLM-L6-v2")
