"""What the compute engine lends the steps: a large request's calls sent a bounded number at
a time (``EMBEDGATE_MAX_CONCURRENT_CHUNKS``), so a request sent after it reaches Triton
while the large one still has calls to make."""

import asyncio
from pathlib import Path

import numpy as np
import pytest

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.preprocess.text import TextTokenizer
from tests.api.compute.test_service import EchoClient, Meta, embed
from tests.helpers import eventually


class CountingClient(EchoClient):
    """Holds every call until the test ends it, counting the calls in flight by request
    (a request's texts are its own words: ``large`` or ``small``)."""

    def __init__(self):
        super().__init__()
        self.waiting: list[asyncio.Event] = []
        self.by_request: list[str] = []
        self.in_flight = {"large": 0, "small": 0}
        self.most_in_flight = 0

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        result = await super().infer(triton_name, tensors, output, timeout_s=timeout_s)
        request = "small" if result.shape[0] == 1 else "large"
        self.by_request.append(request)
        self.in_flight[request] += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight["large"])
        ended = asyncio.Event()
        self.waiting.append(ended)
        try:
            await ended.wait()
        finally:
            self.in_flight[request] -= 1
        return result

    def end_all(self):
        for ended in self.waiting:
            ended.set()


@pytest.mark.parametrize("max_concurrent_chunks", [1, 3])
async def test_a_large_requests_calls_go_a_bounded_number_at_a_time_and_a_later_request_gets_in(
    minilm_path, max_concurrent_chunks
):
    settings = Settings(max_concurrent_chunks=max_concurrent_chunks, coalesce_max_texts=1, spread_min_texts=0)
    client = CountingClient()
    service = EmbeddingService(settings, TritonBackend(client))
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 16)
    model = ServedModel("m", "m", Meta(max_batch_size=4), tokenizer)
    large = [f"word {n} " * (n % 5 + 1) for n in range(40)]  # ten calls of four texts
    try:
        first = asyncio.create_task(embed(service, model, large, normalize=False, timeout_s=30))
        await eventually(lambda: client.in_flight["large"] >= max_concurrent_chunks, what="the large calls")
        second = asyncio.create_task(embed(service, model, ["small"], normalize=False, timeout_s=30))
        await eventually(lambda: client.in_flight["small"] == 1, what="the small request's call")
        # The small request reached Triton with the large one's other calls still unsent.
        assert client.by_request.count("large") == client.in_flight["large"] == max_concurrent_chunks
        # Then the large request's calls, ended one by one, are replaced one by one.
        while not first.done():
            client.end_all()
            await asyncio.sleep(0)
            assert client.in_flight["large"] <= max_concurrent_chunks
        results = await first, await second
    finally:
        client.end_all()
        service.close()
    assert client.by_request.count("large") == 10
    assert client.most_in_flight == max_concurrent_chunks
    expected = tokenizer.encode(large)
    np.testing.assert_array_equal(results[0].vectors[:, 0], expected.attention_mask.sum(1))
    np.testing.assert_array_equal(results[0].vectors[:, 1], expected.input_ids[:, 1])
    np.testing.assert_array_equal(results[1].vectors[:, 1], tokenizer.encode(["small"]).input_ids[:, 1])
