"""A multi-vector model's kept token vectors and MaxSim, as sentence-transformers computes them."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.api.compute.requests.late_interaction import maxsim, normalized, token_rows


@pytest.fixture(scope="module")
def library_maxsim():
    from sentence_transformers.util import maxsim

    return maxsim


def matrices(seed: int, lengths: list[int], dim: int = 8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = np.empty(len(lengths), dtype=object)
    for index, length in enumerate(lengths):
        rows[index] = rng.normal(size=(length, dim)).astype(np.float32)
    return rows


@pytest.mark.parametrize("mean", [False, True])
def test_maxsim_is_the_librarys(library_maxsim, mean):
    import torch

    queries, documents = matrices(0, [5, 3]), matrices(1, [7, 2, 11])
    ours = np.stack([maxsim(query, documents, mean=mean) for query in queries])
    theirs = library_maxsim(
        [torch.from_numpy(q) for q in queries], [torch.from_numpy(d) for d in documents], length_normalize=mean
    ).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_each_row_keeps_its_scored_positions_only():
    vectors = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)
    scored = np.array([[True, False, True, False, True], [False, True, True, True, False]])
    rows = token_rows(vectors, scored)
    assert rows.dtype == object and [row.shape for row in rows] == [(2, 3), (3, 3)]
    np.testing.assert_array_equal(rows[0], vectors[0, [0, 2]])
    np.testing.assert_array_equal(rows[1], vectors[1, [1, 2, 3]])
    unit = normalized(rows)
    np.testing.assert_allclose(np.linalg.norm(unit[1], axis=1), 1.0, rtol=1e-6)
