"""The supervisor: Triton killed under load, clean shutdown, models restored on restart."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx

from tests.helpers import cosine_rows

from .conftest import MINILM, processes_mentioning, start_gateway, wait_ready


async def test_gateway_recovers_when_tritonserver_is_killed(gateway, minilm_loaded, minilm):
    (triton_pid,) = gateway.children("tritonserver")
    texts = [f"in flight while triton dies {i}" for i in range(40)]

    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as client:
        async def one(text: str) -> httpx.Response:
            return await client.post("/infer", json={"model_name": MINILM, "text": [text]})

        in_flight = [asyncio.create_task(one(t)) for t in texts]
        await asyncio.sleep(0.05)
        os.kill(triton_pid, signal.SIGKILL)
        started = time.monotonic()
        responses = await asyncio.gather(*in_flight)
        # Nothing hangs: every request in flight gets an answer quickly.
        assert time.monotonic() - started < 30
        for text, response in zip(texts, responses):
            assert response.status_code in (200, 502, 503), response.text
            if response.status_code == 200:
                served = response.json()["text_embeddings"]
                assert cosine_rows(served, minilm.encode([text]))[0] >= 0.9999
            else:
                assert response.json()["error"]["status"] == response.status_code

        # The supervisor restarts Triton and reloads the model; the gateway serves again.
        deadline = time.monotonic() + 60
        while True:
            response = await one("after the restart")
            if response.status_code == 200:
                break
            assert response.status_code in (502, 503), response.text
            assert time.monotonic() < deadline, gateway.log()[-3000:]
            await asyncio.sleep(0.2)
    assert cosine_rows(response.json()["text_embeddings"], minilm.encode(["after the restart"]))[0] >= 0.9999
    (new_pid,) = gateway.children("tritonserver")
    assert new_pid != triton_pid
    assert "tritonserver exited unexpectedly" in gateway.log()


def test_restart_restores_models_and_shutdown_leaves_nothing_behind(gateway, minilm_loaded, tmp_path, minilm):
    # A second gateway on the same repository: the manifest says MiniLM was loaded.
    second = start_gateway(gateway.repository, tmp_path / "second.log")
    try:
        wait_ready(second)
        with second.client() as http:
            loaded = [m["model_name"] for m in http.get("/loaded_models").json()["models"]]
            assert MINILM in loaded
            served = http.post("/infer", json={"model_name": MINILM, "text": ["restored"]}).json()
            assert cosine_rows(served["text_embeddings"], minilm.encode(["restored"]))[0] >= 0.9999
        shm_prefix = f"embedgate_{second.process.pid}_"
        assert processes_mentioning(shm_prefix), "expected Triton and its Python stubs to be running"
        # A keep-alive connection held open across shutdown must not make Triton hang or crash.
        keep_alive = httpx.Client(base_url=second.url)
        keep_alive.get("/health")
    finally:
        code = second.stop()
    keep_alive.close()

    # uvicorn re-raises the SIGTERM it handled once shutdown is complete.
    assert code in (0, -signal.SIGTERM), second.log()[-3000:]
    assert "Segmentation fault" not in second.log()
    deadline = time.monotonic() + 10
    while processes_mentioning(shm_prefix) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(shm_prefix) == [], "tritonserver or stub processes left behind"
    assert not list(Path("/dev/shm").glob(f"{shm_prefix}*")), "shared memory left behind"
