"""A sentence-transformer: dense text embeddings (``SentenceTransformer.encode``)."""

from __future__ import annotations

from typing import Any

from ..quantize import available
from .base import ServedKind, Task


class DenseKind(ServedKind):
    name = "sentence_transformer"
    title = "a sentence-transformer (dense text embeddings)"
    tasks = frozenset({Task.EMBED})

    def listing(self) -> dict[str, Any]:
        return {"precisions": list(available(self.metadata.calibration))}
