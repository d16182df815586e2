"""The seed's recipe, the peer the performance page measures against: requests sent
together (its batcher gathers them into one ``encode`` where they meet in its window) each
get their own texts' vectors, as the model itself gives them."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np

from embedgate.bench import seed_recipe


async def test_requests_together_each_get_their_own_texts_vectors(minilm_path, minilm):
    app = seed_recipe.build(minilm_path)
    texts = [["a first request"], ["a second", "with two texts"], ["and a third one"]]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://seed") as client:
            answers = await asyncio.gather(
                *[client.post("/v1/embeddings", json={"model": "m", "input": batch}) for batch in texts]
            )
    for batch, answer in zip(texts, answers):
        assert answer.status_code == 200
        data = answer.json()["data"]
        assert [item["index"] for item in data] == list(range(len(batch)))
        served = np.asarray([item["embedding"] for item in data])
        np.testing.assert_allclose(served, minilm.encode(batch), atol=1e-5)
