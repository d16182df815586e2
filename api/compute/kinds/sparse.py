"""A sparse encoder (SPLADE): a weight per vocabulary token, most of them zero
(``SparseEncoder.encode``). Triton returns the whole vector; the gateway keeps the
non-zero weights, at most ``top_k`` of them (the model's own ``max_active_dims`` unless the
request says otherwise), as ``encode`` does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .base import ServedKind, Task


@dataclass(frozen=True)
class SparseVector:
    indices: np.ndarray  # int64, ascending: the vocabulary ids with a weight
    values: np.ndarray  # float32, their weights


def sparsify(vectors: np.ndarray, top_k: int | None) -> list[SparseVector]:
    """Each row's non-zero weights; with ``top_k``, only the largest ``top_k`` of them
    (``encode(max_active_dims=top_k)``: the top-k of a row, of which the zeros stay zero)."""
    rows = []
    for row in vectors:
        indices = np.flatnonzero(row)
        if top_k is not None and len(indices) > top_k:
            keep = np.argpartition(-row[indices], top_k - 1)[:top_k]
            indices = np.sort(indices[keep])
        rows.append(SparseVector(indices.astype(np.int64), row[indices].astype(np.float32)))
    return rows


class SparseKind(ServedKind):
    name = "sparse_encoder"
    title = "a sparse encoder (a weight per vocabulary token)"
    tasks = frozenset({Task.SPARSE})

    def default_top_k(self) -> int | None:
        sparse = self.metadata.sparse
        return sparse.max_active_dims if sparse is not None else None

    def listing(self) -> dict[str, Any]:
        return {"max_active_dims": self.default_top_k()}
