"""A sparse encoder's vectors kept as their non-zero weights, as SparseEncoder.encode keeps them."""

import numpy as np
import pytest

from embedgate.api.compute.requests.kinds.sparse import sparsify


@pytest.fixture(scope="module")
def select_max_active_dims():
    from sentence_transformers.util import select_max_active_dims

    return select_max_active_dims


@pytest.mark.parametrize("top_k", [None, 1, 5, 40, 1000])
def test_the_non_zero_weights_and_the_top_k_as_the_library_selects_them(select_max_active_dims, top_k):
    import torch

    rng = np.random.default_rng(0)
    # ReLU-like rows: about half the vocabulary zero, the rest distinct weights.
    vectors = np.maximum(rng.normal(size=(6, 80)), 0).astype(np.float32)
    vectors[5] = 0  # a text with no weight at all
    expected = select_max_active_dims(torch.from_numpy(vectors), top_k).numpy() if top_k else vectors
    for row, want in zip(sparsify(vectors, top_k), expected):
        assert row.indices.tolist() == np.flatnonzero(want).tolist()
        np.testing.assert_array_equal(row.values, want[row.indices])
        assert row.indices.dtype == np.int64 and row.values.dtype == np.float32
