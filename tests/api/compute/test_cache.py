"""The response cache: hits, misses, eviction within its bound, and never another model's
or another prompt's row; then the same through EmbeddingService with a fake Triton."""

from pathlib import Path

import numpy as np
import pytest

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.compute.cache import ENTRY_OVERHEAD_BYTES, ResponseCache
from embedgate.api.compute.requests.prompts import PromptChoice
from embedgate.api.compute.service import EmbeddingService
from embedgate.api.models.registry import ServedModel
from embedgate.api.settings import Settings
from embedgate.contract.preprocess.text import TextTokenizer

from .test_service import EchoClient, Meta, embed


def rows(*values: float) -> np.ndarray:
    return np.asarray([[v, v] for v in values], dtype=np.float32)


def test_a_stored_input_is_a_hit_and_another_a_miss():
    cache = ResponseCache(1 << 20)
    cache.store(1, "", ["a", "b"], rows(1, 2), [3, 4], [False, True])
    found = cache.lookup(1, "", ["b", "c", "a"])
    assert [row is None for row in found] == [False, True, False]
    np.testing.assert_array_equal(found[0].vector, [2, 2])
    assert (found[0].token_count, found[0].truncated) == (4, True)
    assert (cache.hits, cache.misses) == (2, 1)


def test_rows_are_copies_not_views_of_the_batch():
    cache = ResponseCache(1 << 20)
    batch = rows(1, 2)
    cache.store(1, "", ["a", "b"], batch, [3, 4], [False, False])
    batch[:] = 0  # a caller normalizing its answer in place
    np.testing.assert_array_equal(cache.lookup(1, "", ["a"])[0].vector, [1, 1])


def test_another_model_or_prompt_never_gets_the_row():
    cache = ResponseCache(1 << 20)
    cache.store(1, "query: ", ["a"], rows(1), [3], [False])
    assert cache.lookup(2, "query: ", ["a"]) == [None]  # another model (or load) with the same text
    assert cache.lookup(1, "passage: ", ["a"]) == [None]  # another prompt
    assert cache.lookup(1, "", ["a"]) == [None]  # no prompt
    assert cache.lookup(1, "query: ", [("a", "b")]) == [None]  # a pair is not its query
    assert cache.lookup(1, "query: ", ["a"])[0] is not None


def test_the_least_recently_used_rows_go_first_to_keep_the_bound():
    one = rows(1).nbytes + len("a") + 49 + ENTRY_OVERHEAD_BYTES  # a one-character str is 50 bytes
    cache = ResponseCache(3 * one)
    cache.store(1, "", ["a", "b", "c"], rows(1, 2, 3), [1, 1, 1], [False] * 3)
    assert cache.stats().entries == 3 and cache.stats().bytes <= cache.max_bytes
    cache.lookup(1, "", ["a"])  # "a" is now the most recently used
    cache.store(1, "", ["d"], rows(4), [1], [False])
    assert [row is not None for row in cache.lookup(1, "", ["a", "b", "c", "d"])] == [True, False, True, True]
    stats = cache.stats()
    assert (stats.entries, stats.evictions) == (3, 1) and stats.bytes <= stats.max_bytes


def test_a_row_larger_than_the_whole_cache_is_not_kept():
    cache = ResponseCache(100)
    cache.store(1, "", ["a"], np.zeros((1, 1000), np.float32), [1], [False])
    assert cache.stats().entries == 0 and cache.stats().bytes == 0


class CountingClient(EchoClient):
    """The echo client, counting the rows the model ran for."""

    def __init__(self):
        super().__init__()
        self.rows = 0

    async def infer(self, triton_name, tensors, output, *, timeout_s, version=""):
        self.rows += tensors["input_ids"].shape[0]
        return await super().infer(triton_name, tensors, output, timeout_s=timeout_s)


@pytest.fixture
def cached(minilm_path):
    client = CountingClient()
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 8)
    service = EmbeddingService(Settings(response_cache_mb=1), TritonBackend(client))
    yield service, client, tokenizer
    service.close()


def model_with(tokenizer, name: str = "m") -> ServedModel:
    return ServedModel(name, name, Meta(prompts={"query": "query: "}), tokenizer)


@pytest.mark.parametrize("count", [2, 10])  # merged with others, or a large request of its own
async def test_repeated_inputs_are_answered_without_the_model_and_alike(cached, count):
    service, client, tokenizer = cached
    model = model_with(tokenizer)
    # Even ones are cut to the 8 tokens of this tokenizer.
    texts = [f"text {i} " + "long " * (8 if i % 2 == 0 else 0) for i in range(count)]
    first = await embed(service, model, texts, normalize=False, timeout_s=5)
    assert (client.rows, first.cached) == (count, 0)
    # Half again, half new, and one new text twice: the model runs once per new text.
    again = texts[::2] + ["new", "new"]
    second = await embed(service, model, again, normalize=False, timeout_s=5)
    assert client.rows == count + 1 and second.cached == len(texts[::2])
    fresh = await embed(service, model, again, normalize=False, timeout_s=5)
    assert client.rows == count + 1 and fresh.cached == len(again)
    # What the cache answers is what the model answered: vectors, token counts, truncation.
    uncached = EmbeddingService(Settings(response_cache_mb=0), TritonBackend(CountingClient()))
    try:
        computed = await embed(uncached, model, again, normalize=False, timeout_s=5)
    finally:
        uncached.close()
    for result in (second, fresh):
        np.testing.assert_array_equal(result.vectors, computed.vectors)
        assert result.token_counts == computed.token_counts
        assert result.truncated == computed.truncated == len(texts[::2])
    assert (model.cache_hits, model.cache_misses) == (len(texts[::2]) + len(again), count + 2)


async def test_normalization_is_applied_to_cached_rows_and_does_not_change_them(cached):
    service, client, tokenizer = cached
    model = model_with(tokenizer)
    raw = await embed(service, model, ["a b", "c"], normalize=False, timeout_s=5)
    unit = await embed(service, model, ["a b", "c"], normalize=True, timeout_s=5)
    again = await embed(service, model, ["a b", "c"], normalize=False, timeout_s=5)
    assert client.rows == 2
    np.testing.assert_allclose(np.linalg.norm(unit.vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(again.vectors, raw.vectors)


async def test_no_hit_across_models_loads_or_prompts(cached):
    service, client, tokenizer = cached
    first, other = model_with(tokenizer), model_with(tokenizer, "other")
    await embed(service, first, ["same"], normalize=False, timeout_s=5)
    await embed(service, other, ["same"], normalize=False, timeout_s=5)
    # The same name loaded again (a new conversion, maybe new weights) starts afresh.
    await embed(service, model_with(tokenizer), ["same"], normalize=False, timeout_s=5)
    query = await embed(service, 
        first, ["same"], normalize=False, timeout_s=5, prompt=PromptChoice(prompt_name="query")
    )
    assert client.rows == 4 and query.cached == 0
    # The prompt is in what the model saw, as without the cache.
    assert query.token_counts == tokenizer.encode(["query: same"]).token_counts


async def test_with_the_cache_off_every_input_runs_the_model(minilm_path):
    client = CountingClient()
    service = EmbeddingService(Settings(response_cache_mb=0), TritonBackend(client))
    model = model_with(TextTokenizer(Path(minilm_path) / "tokenizer.json", 8))
    try:
        assert service.cache is None
        for _ in range(2):
            await embed(service, model, ["a", "a"], normalize=False, timeout_s=5)
        assert client.rows == 4 and (model.cache_hits, model.cache_misses) == (0, 0)
    finally:
        service.close()
