"""One served kind per model kind, behind one interface (:class:`base.ServedKind`):

- ``dense``: sentence-transformers, dense text embeddings;
- ``sparse``: sparse encoders (SPLADE), a weight per vocabulary token;
- ``cross_encoder``: cross-encoders, a score per (query, document) pair;
- ``clip``: OpenCLIP, text and image embeddings.

The kind of a model is what its conversion recorded (``metadata.json``'s ``kind``); the
converter of the same kind wrote it (``converters/kinds/``).
"""

from __future__ import annotations

from embedgate.converters.spec import ModelMetadata

from .base import ServedKind, Task
from .clip import ClipKind
from .cross_encoder import CrossEncoderKind
from .dense import DenseKind
from .sparse import SparseKind, SparseVector, sparsify

KINDS: dict[str, type[ServedKind]] = {kind.name: kind for kind in (DenseKind, SparseKind, CrossEncoderKind, ClipKind)}

__all__ = ["KINDS", "ServedKind", "SparseVector", "Task", "kind_of", "sparsify"]


def kind_of(metadata: ModelMetadata) -> ServedKind:
    return KINDS[metadata.kind](metadata)
