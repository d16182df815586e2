"""TritonClient against a small HTTP server that answers like Triton's binary protocol."""

from __future__ import annotations

import asyncio
import gzip
import json

import numpy as np
import pytest
import pytest_asyncio
from aiohttp import web

from embedgate.api.errors import DeadlineExceeded
from embedgate.api.triton.client import TritonClient

EMBEDDINGS = np.arange(6, dtype=np.float32).reshape(2, 3)


def triton_answer(request: web.Request, body: bytes) -> web.Response:
    header = json.dumps(
        {
            "model_name": request.match_info["model"],
            "outputs": [
                {
                    "name": "embedding",
                    "datatype": "FP32",
                    "shape": list(EMBEDDINGS.shape),
                    "parameters": {"binary_data_size": EMBEDDINGS.nbytes},
                }
            ],
        }
    ).encode()
    payload = header + EMBEDDINGS.tobytes()
    headers = {"Inference-Header-Content-Length": str(len(header))}
    # Like Triton: an answer is compressed whenever the client offers gzip.
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        payload = gzip.compress(payload)
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=payload, headers=headers, content_type="application/octet-stream")


# The server runs in each test's own event loop (fixtures default to the session's).
@pytest_asyncio.fixture(loop_scope="function")
async def fake_triton(unused_tcp_port):
    seen: list[dict[str, str]] = []
    delay = {"s": 0.0}

    async def infer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        body = await request.read()
        await asyncio.sleep(delay["s"])
        return triton_answer(request, body)

    app = web.Application()
    app.router.add_post("/v2/models/{model}/infer", infer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    yield f"127.0.0.1:{unused_tcp_port}", seen, delay
    await runner.cleanup()


@pytest_asyncio.fixture(loop_scope="function")
async def triton_client():
    clients = []

    def make(url: str) -> TritonClient:
        clients.append(TritonClient(url, control_timeout_s=5))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


async def test_answers_come_back_uncompressed(fake_triton, triton_client):
    url, seen, _ = fake_triton
    client = triton_client(url)
    ids = np.ones((2, 4), dtype=np.int64)

    vectors = await client.infer("m", {"input_ids": ids, "attention_mask": ids}, "embedding", timeout_s=5)

    np.testing.assert_array_equal(vectors, EMBEDDINGS)
    # Compressing a few floats on both ends of a loopback connection only costs CPU.
    assert seen[0].get("Accept-Encoding") == "identity"


async def test_a_slow_answer_is_a_deadline(fake_triton, triton_client):
    url, _, delay = fake_triton
    client = triton_client(url)
    delay["s"] = 1.0
    ids = np.ones((1, 4), dtype=np.int64)

    with pytest.raises(DeadlineExceeded):
        await client.infer("m", {"input_ids": ids, "attention_mask": ids}, "embedding", timeout_s=0.1)
