"""A sparse encoder: a weight per vocabulary token, most of them zero
(``SparseEncoder.encode``). Triton returns the whole vector; the gateway keeps the non-zero
weights, at most ``top_k`` of them (the model's own ``max_active_dims`` unless the request
says otherwise), as ``encode`` does. An inference-free model's query route is computed by
the gateway from its stored weights (``requests/static.py``), with no Triton call."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from embedgate.contract.kinds.sparse import KIND, SparseInfo
from embedgate.contract.spec import STATIC_WEIGHTS_FILE, RouteInfo

from ....errors import WrongModelKind
from ..asks import Ask, Output, Plan, Served, text_run
from ..results import SparseVector
from ..static import TokenWeights
from .base import ServedKind


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
    name = KIND.name
    title = "a sparse encoder (a weight per vocabulary token)"
    outputs = frozenset({Output.SPARSE})
    text_output = Output.SPARSE
    pooling = "splade"
    listing_fields = {
        "max_active_dims": (
            int | None,
            Field(None, description="Sparse encoders: the most non-zero weights per text by default (none: all)."),
        )
    }

    def static_route(self, directory: Path, info: RouteInfo) -> TokenWeights:
        return TokenWeights(np.load(directory / STATIC_WEIGHTS_FILE).astype(np.float32, copy=False))

    def default_top_k(self) -> int | None:
        sparse = self.metadata.record_of(SparseInfo)
        return sparse.max_active_dims if sparse is not None else None

    def plan(self, model: Served, ask: Ask) -> Plan:
        options = ask.options
        if options.precision != "float32":
            raise WrongModelKind("precision is for dense embeddings; a sparse encoder's weights come as floats")
        if options.normalize_given and options.normalize:
            raise WrongModelKind("normalize is for dense embeddings; sparse embeddings come as the model computes them")
        limit = options.top_k if options.top_k is not None else self.default_top_k()
        run = text_run(model, ask.inputs, ask.prompt)
        return Plan([run], lambda results: dataclasses.replace(results[0], sparse=sparsify(results[0].vectors, limit)))

    def listing(self) -> dict[str, Any]:
        return {"max_active_dims": self.default_top_k()}
