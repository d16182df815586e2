"""A sentence-transformer: dense text embeddings (``SentenceTransformer.encode``)."""

from __future__ import annotations

from typing import Any

from ..preprocess.text import TextTokenizer
from ..quantize import available
from .base import Files, ServedKind, Task


class DenseKind(ServedKind):
    name = "sentence_transformer"
    title = "a sentence-transformer (dense text embeddings)"
    tasks = frozenset({Task.EMBED})

    def tokenizer(self, files: Files, triton_name: str) -> TextTokenizer:
        metadata = self.metadata
        return TextTokenizer(
            self.tokenizer_file(files, triton_name), metadata.max_seq_length, metadata.strip_whitespace
        )

    def listing(self) -> dict[str, Any]:
        return {"precisions": list(available(self.metadata.calibration))}
