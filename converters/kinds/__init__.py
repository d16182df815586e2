"""One converter per model kind, behind one interface (:class:`base.KindConverter`).

- ``dense``: ``SentenceTransformer``, dense text embeddings;
- ``sparse``: ``SparseEncoder`` (SPLADE, and inference-free models), a weight per vocabulary token;
- ``cross_encoder``: ``CrossEncoder``, a score per text or pair (a reranker's relevance, a classifier's labels);
- ``multi_vector``: ``MultiVectorEncoder`` (ColBERT-style late interaction), a vector per token;
- ``clip``: OpenCLIP, text and image towers in one embedding space.

A load names a library; for sentence-transformers the directory itself says which class it
is (``converters/library/declared.py``), and that class's converter runs, or the load is refused
with the reason. A new kind is a new module here and a line in :data:`LIBRARY_KINDS` (the
gateway's side is ``api/compute/requests/kinds/``; a test keeps the two registries' kinds in step).
"""

from __future__ import annotations

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.spec import ConversionSpec
from embedgate.converters.kinds.base import KindConverter, Step
from embedgate.converters.kinds.clip.converter import ClipConverter
from embedgate.converters.kinds.cross_encoder import CrossEncoderConverter
from embedgate.converters.kinds.dense.converter import DenseConverter
from embedgate.converters.kinds.library import LibraryKind
from embedgate.converters.kinds.multi_vector import MultiVectorConverter
from embedgate.converters.kinds.sparse.converter import SparseConverter
from embedgate.converters.library import declared
from embedgate.converters.library.module_stack import resolve_source

# sentence-transformers' model_type -> the converter of that kind.
LIBRARY_KINDS: dict[str, type[LibraryKind]] = {
    "SentenceTransformer": DenseConverter,
    "SparseEncoder": SparseConverter,
    "CrossEncoder": CrossEncoderConverter,
    "MultiVectorEncoder": MultiVectorConverter,
}
# Every kind a conversion may publish (metadata.json's kind).
KINDS: tuple[str, ...] = (*(converter.kind for converter in LIBRARY_KINDS.values()), ClipConverter.kind)

__all__ = ["KINDS", "KindConverter", "converter_for"]


def converter_for(spec: ConversionSpec, step: Step) -> KindConverter:
    """The converter of the kind ``spec`` names (OpenCLIP) or its directory declares."""
    if spec.library == "open_clip":
        return ClipConverter(spec, step)
    source = resolve_source(spec)
    found = declared.read_declared(declared.model_files(source.location))
    converter = LIBRARY_KINDS.get(found.kind)
    if converter is None:
        raise declared.unsupported(found, tuple(LIBRARY_KINDS))
    declared.check_custom_modules(found, trust_remote_code=spec.trust_remote_code)
    if spec.variant is not None and converter is not DenseConverter:
        raise UnsupportedModelError(
            f"the model is a {found.kind} (per {found.evidence}); variants ('@{spec.variant}') are built "
            "for SentenceTransformer models only"
        )
    step(f"the model is a {found.kind} (per {found.evidence})")
    return converter(spec, step, source, found)
