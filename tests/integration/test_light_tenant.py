"""A light key is not queued behind a flood, on the real gateway and tritonserver: while key
A floods ``/infer`` open loop at several times what the server answers (its in-flight limit
full, the rest refused), key B's single sentences, one every half second, are all answered,
with the PyTorch model's vectors, in at most a quarter of the time A's answered requests
take (docs/limits.md, keys are tenants)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import numpy as np
import orjson
import pytest

from embedgate.bench.connection import Target
from embedgate.bench.tenants import Answer, Pool, closed_loop, paced
from tests.helpers import cosine_rows

from .conftest import MINILM
from .test_tenants import KEY_A, KEY_B, WORDS, own_gateway

CALIBRATION_S = 2.0
CALIBRATION_CLIENTS = 64
FLOOD_FACTOR = 2.5  # A's rate over what the server answered a moment before
MAX_FLOOD_PER_S = 2000.0  # at most 14,000 requests; a quiet 2-core machine answers about 700 a second
FLOOD_S = 7.0
RAMP_S = 1.5  # A's in-flight limit (256) fills; B starts then
LIGHT_PER_S = 2.0
IDLE_REQUESTS = 6
# The issue's target: B's median at most a quarter of A's answered requests' (B's measured
# at about a tenth on 2 cores).
MOST_OF_A = 0.25


@pytest.fixture
def tenants(gateway, minilm_loaded, tmp_path):
    keyed = own_gateway(gateway, tmp_path, response_cache_mb="0")
    try:
        yield keyed
    finally:
        keyed.stop()


class Key:
    """One key's single-sentence requests to ``/infer``, each a new sentence."""

    def __init__(self, url: str, key: str, name: str):
        target = Target.from_url(url, {"authorization": f"Bearer {key}"})
        self.pool, self.head = Pool(target, timeout_s=60), target.post_head("/infer")
        self.name, self.run, self.rng = name, uuid.uuid4().hex[:8], np.random.default_rng()
        self.texts: dict[int, str] = {}

    def send(self, n: int) -> Awaitable[Answer]:
        text = self.texts[n] = f"{self.name} {self.run} {n} " + " ".join(self.rng.choice(WORDS, size=10))
        return self.pool.post(self.head, orjson.dumps({"model_name": MINILM, "text": [text]}))

    def numbered(self, first: int) -> Callable[[int], Awaitable[Answer]]:
        return lambda n: self.send(first + n)


def median_ms(answers: list[Answer]) -> float:
    return float(np.median([answer.latency_s for answer in answers])) * 1000


async def test_a_light_key_is_answered_ahead_of_a_flood(tenants, minilm):
    a, b = Key(tenants.url, KEY_A, "flood"), Key(tenants.url, KEY_B, "light")
    try:
        # What the server answers of A's a second, closed loop (it warms the model too).
        capacity = await closed_loop(a.numbered(-(10**6)), CALIBRATION_CLIENTS, CALIBRATION_S)
        idle = [await b.send(-1 - n) for n in range(IDLE_REQUESTS)]

        flood_per_s = min(MAX_FLOOD_PER_S, FLOOD_FACTOR * capacity)
        ramp = int(flood_per_s * RAMP_S)

        async def light_after_the_ramp() -> list[Answer]:
            await asyncio.sleep(RAMP_S)
            return await paced(b.numbered(0), LIGHT_PER_S, FLOOD_S - RAMP_S)

        flood, light = await asyncio.gather(paced(a.numbered(0), flood_per_s, FLOOD_S), light_after_the_ramp())
    finally:
        a.pool.close()
        b.pool.close()

    answered = [answer for answer in flood[ramp:] if answer.status == 200]
    refused = [answer for answer in flood if answer.status != 200]
    a_ms, b_ms = median_ms(answered), median_ms(light)
    print(f"\ncapacity {capacity:.0f} requests/s, flood {flood_per_s:.0f}/s: A {len(flood)} sent, "
          f"{len(flood) - len(refused)} answered (median {a_ms:.0f} ms after the ramp), {len(refused)} refused; "
          f"B {len(light)} sent, median {b_ms:.0f} ms (idle {median_ms(idle):.0f} ms), slowest "
          f"{max(x.latency_s for x in light) * 1000:.0f} ms")
    # A flooded: its in-flight limit full, the rest refused at once as the documented overload.
    assert answered and refused
    assert all(answer.status == 503 and b'"overloaded"' in answer.body for answer in refused)
    assert all(answer.status == 200 for answer in idle + light), [answer.body for answer in light]
    assert b_ms <= MOST_OF_A * a_ms, (b_ms, a_ms, [round(x.latency_s * 1000) for x in light])
    # Computed for B (nothing from a cache), with the library's vectors.
    assert all(answer.headers["x-cached-inputs"] == "0" for answer in light)
    for n in (0, len(light) - 1):
        vector = np.asarray(orjson.loads(light[n].body)["text_embeddings"])
        assert cosine_rows(vector, minilm.encode([b.texts[n]])).min() >= 0.9999
