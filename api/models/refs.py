"""A model as a request names it: ``org/name`` (a variant ``org/name@int8``), or an OpenCLIP
architecture with its pretrained. What the registry keys it by, the Triton models it is
(or will be) published as, and which metadata is its own."""

from __future__ import annotations

from dataclasses import dataclass

from embedgate.contract.kinds.clip import ClipMetadata
from embedgate.contract.kinds.dense import DenseInfo, late_part_name
from embedgate.contract.kinds.multimodal import MultimodalMetadata, multimodal_part_names
from embedgate.contract.kinds.vision_language import VisionLanguageMetadata, vision_language_part_names
from embedgate.contract.spec import ModelLibrary, ModelMetadata, Variant, clip_part_names

from .names import clip_key, clip_triton_name, split_clip_key, split_variant, to_triton_name


@dataclass(frozen=True)
class ModelRef:
    # The registry's key and the name /v1 lists: "org/name", "org/name@int8", "ViT-B-32:tag".
    key: str
    # The model_name its metadata records (a variant's own name; a CLIP model's architecture).
    model_name: str
    # Its Triton name (a CLIP model's: the base of its two parts' names).
    triton_name: str
    library: ModelLibrary
    pretrained: str | None = None

    @classmethod
    def named(cls, name: str, pretrained: str | None = None) -> ModelRef:
        """The model ``name`` (and ``pretrained``, an OpenCLIP model) names; a name that is
        not safe is refused here (InvalidModelName)."""
        if pretrained is None:
            return cls(name, name, to_triton_name(name), "sentence_transformers")
        return cls(clip_key(name, pretrained), name, clip_triton_name(name, pretrained), "open_clip", pretrained)

    @classmethod
    def from_key(cls, key: str) -> ModelRef:
        """The model a registry key (or a /v1 model name) names."""
        clip = split_clip_key(key)
        return cls.named(*clip) if clip else cls.named(key)

    @property
    def variant(self) -> Variant | None:
        return split_variant(self.model_name)[1] if self.library == "sentence_transformers" else None

    def parts(self) -> tuple[str, ...]:
        """The Triton models it is published as, as far as its name tells: a CLIP model's two
        towers; a sentence-transformers model's first (a multimodal one's image graph is
        named by its metadata: ``parts_of``)."""
        return clip_part_names(self.triton_name) if self.library == "open_clip" else (self.triton_name,)

    def every_part(self) -> tuple[str, ...]:
        """Every Triton model a model of this name may be published as, the first first:
        ``parts``, and a sentence-transformers model's image graph (a multimodal one's) or
        late-chunking graph (a dense one's)."""
        if self.library == "open_clip":
            return self.parts()
        return (*multimodal_part_names(self.triton_name), late_part_name(self.triton_name))

    def parts_of(self, metadata: ModelMetadata) -> tuple[str, ...]:
        """The Triton models the published model ``metadata`` describes is made of."""
        if metadata.record_of(MultimodalMetadata) is not None:
            return multimodal_part_names(self.triton_name)
        if metadata.record_of(VisionLanguageMetadata) is not None:
            return vision_language_part_names(self.triton_name)
        dense = metadata.record_of(DenseInfo)
        if dense is not None and dense.late_chunking is not None:
            return (self.triton_name, late_part_name(self.triton_name))
        return self.parts()

    def owns(self, metadata: ModelMetadata | None) -> bool:
        """Whether ``metadata`` (a part's in the repository) is this model's."""
        if metadata is None or metadata.model_name != self.model_name:
            return False
        clip = metadata.record_of(ClipMetadata)
        if self.pretrained is None:
            return clip is None
        return clip is not None and clip.pretrained == self.pretrained

    def described(self) -> str:
        return self.model_name if self.pretrained is None else f"{self.model_name} ({self.pretrained})"
