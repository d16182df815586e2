"""A ``SparseEncoder`` (SPLADE, inference-free models): a weight per vocabulary token."""

from __future__ import annotations

from embedgate.contract.kinds.base import Kind, KindRecord


class SparseInfo(KindRecord):
    """A sparse encoder's graph: a weight for every token of the vocabulary (most zero)."""

    key = "sparse"

    # The model's own cap on non-zero weights per text (encode's default top-k); None: all.
    max_active_dims: int | None = None
    pooling: str
    activation: str


KIND = Kind("sparse_encoder", record=SparseInfo, library_class="SparseEncoder")
