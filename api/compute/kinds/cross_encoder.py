"""A cross-encoder: a relevance score per (query, document) pair (``CrossEncoder.predict``,
its activation included), for reranking. The pair is one input: tokenized together, and
merged with other requests' pairs like any text."""

from __future__ import annotations

from typing import Any

import numpy as np

from embedgate.converters.spec import SCORES, TOKEN_TYPE_IDS

from ..preprocess.text import PairTokenizer, TokenBatch
from .base import Files, ServedKind, Task


class CrossEncoderKind(ServedKind):
    name = "cross_encoder"
    title = "a cross-encoder (a relevance score per query and document)"
    tasks = frozenset({Task.RERANK})
    output = SCORES

    def _takes_token_types(self) -> bool:
        info = self.metadata.cross_encoder
        return info is not None and info.token_type_ids

    def tokenizer(self, files: Files, triton_name: str) -> PairTokenizer:
        metadata = self.metadata
        return PairTokenizer(
            self.tokenizer_file(files, triton_name),
            metadata.max_seq_length,
            metadata.strip_whitespace,
            type_ids=self._takes_token_types(),
        )

    def text_inputs(self, batch: TokenBatch, rows: np.ndarray | slice, width: int) -> dict[str, np.ndarray]:
        tensors = super().text_inputs(batch, rows, width)
        if self._takes_token_types():
            assert batch.token_type_ids is not None
            tensors[TOKEN_TYPE_IDS] = np.ascontiguousarray(batch.token_type_ids[rows, :width])
        return tensors

    def listing(self) -> dict[str, Any]:
        info = self.metadata.cross_encoder
        return {"num_labels": info.num_labels, "activation": info.activation} if info else {}
