"""A loaded model as the compute path sees it: its Triton models, metadata and tokenizer."""

from __future__ import annotations

from dataclasses import dataclass, field

from embedgate.converters.spec import ModelMetadata, clip_part_names

from .preprocess.clip_text import AnyClipTokenizer
from .preprocess.text import TextTokenizer


@dataclass
class ServedModel:
    # The registry's key: the model name, or "model_name:pretrained" for a CLIP model.
    name: str
    triton_name: str
    metadata: ModelMetadata
    tokenizer: TextTokenizer | AnyClipTokenizer
    # Requests holding an admission slot (compute/admission.py).
    inflight: int = field(default=0)

    @property
    def triton_names(self) -> tuple[str, ...]:
        """The Triton models it is made of: one, or a CLIP model's (text, image) towers."""
        return clip_part_names(self.triton_name) if self.metadata.clip else (self.triton_name,)
