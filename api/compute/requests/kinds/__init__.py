"""One served kind per model kind, behind one interface (:class:`base.ServedKind`):

- ``dense``: sentence-transformers, dense text embeddings;
- ``sparse``: sparse encoders (SPLADE, inference-free models), a weight per vocabulary token;
- ``cross_encoder``: cross-encoders, a score per text or pair (reranking, classification);
- ``multi_vector``: multi-vector models (ColBERT), a vector per token, reranking by MaxSim;
- ``clip``: OpenCLIP, text and image embeddings.

The kind of a model is what its conversion recorded (``metadata.json``'s ``kind``); the
converter of the same kind wrote it (``converters/kinds/``). This registry is the gateway's
one list of kinds: the schemas and the listings read it.
"""

from __future__ import annotations

from embedgate.contract.spec import ModelMetadata

from ....errors import ModelConflict
from .base import ServedKind
from .clip import ClipKind
from .cross_encoder import CrossEncoderKind
from .dense import DenseKind
from .multi_vector import MultiVectorKind
from .sparse import SparseKind, sparsify

KINDS: dict[str, type[ServedKind]] = {
    kind.name: kind for kind in (DenseKind, SparseKind, CrossEncoderKind, MultiVectorKind, ClipKind)
}

__all__ = ["KINDS", "ServedKind", "kind_of", "sparsify"]


def kind_of(metadata: ModelMetadata) -> ServedKind:
    kind = KINDS.get(metadata.kind)
    if kind is None:
        raise ModelConflict(
            f"model '{metadata.model_name}' is of a kind this gateway does not serve ({metadata.kind!r}): "
            "it was converted by another embedgate version"
        )
    return kind(metadata)
