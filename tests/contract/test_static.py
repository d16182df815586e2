"""A static embedding model's computation (``contract/static.py``): the mean of a vector per
token, as ``StaticEmbedding``'s ``EmbeddingBag`` takes it, then Normalize."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract import static
from embedgate.contract.static import mean_vectors


def _library(vectors: np.ndarray, bags: list[list[int]], normalize: bool) -> np.ndarray:
    import torch

    bag = torch.nn.EmbeddingBag.from_pretrained(torch.from_numpy(vectors), mode="mean")
    ids = torch.tensor([i for ids in bags for i in ids], dtype=torch.long)
    offsets = torch.tensor(np.cumsum([0] + [len(ids) for ids in bags[:-1]]), dtype=torch.long)
    out = bag(ids, offsets)
    return (torch.nn.functional.normalize(out, p=2, dim=1) if normalize else out).numpy()


def _padded(bags: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(1, max(len(ids) for ids in bags))
    input_ids = np.zeros((len(bags), width), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for row, ids in enumerate(bags):
        input_ids[row, : len(ids)], mask[row, : len(ids)] = ids, 1
    return input_ids, mask


@pytest.mark.parametrize("normalize", [False, True])
def test_each_texts_mean_of_its_tokens_vectors_and_zeros_for_an_empty_one(normalize):
    vectors = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    # Repeated tokens count each time (a mean, not a set); an empty text is an empty bag.
    bags = [[3, 7, 7, 49], [], [0], [12, 5, 5, 5, 5, 30, 31], []]
    ours = mean_vectors(vectors, *_padded(bags), normalize=normalize)
    np.testing.assert_allclose(ours, _library(vectors, bags, normalize), atol=1e-6)
    assert ours.dtype == np.float32 and not ours[[1, 4]].any()


def test_a_long_text_is_summed_block_by_block_as_one(monkeypatch):
    monkeypatch.setattr(static, "BLOCK_TOKENS", 5)
    vectors = np.random.default_rng(1).normal(size=(40, 6)).astype(np.float32)
    rng = np.random.default_rng(2)
    # Texts across block edges, one of many blocks, and empty ones between.
    bags = [rng.integers(0, 40, 3).tolist(), [], rng.integers(0, 40, 23).tolist(), rng.integers(0, 40, 4).tolist(), []]
    ours = mean_vectors(vectors, *_padded(bags), normalize=True)
    np.testing.assert_allclose(ours, _library(vectors, bags, True), atol=1e-6)


def test_a_batch_of_empty_texts():
    vectors = np.ones((4, 3), dtype=np.float32)
    ids, mask = np.zeros((2, 0), dtype=np.int64), np.zeros((2, 0), dtype=np.int64)
    assert mean_vectors(vectors, ids, mask, normalize=True).tolist() == [[0.0] * 3] * 2
