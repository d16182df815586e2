"""A model as a request names it: ``org/name`` (a variant ``org/name@int8``), or an OpenCLIP
architecture with its pretrained. What the registry keys it by, the Triton models it is
(or will be) published as, and which metadata is its own."""

from __future__ import annotations

from dataclasses import dataclass

from embedgate.contract import kinds
from embedgate.contract.spec import ModelLibrary, ModelMetadata, Variant

from ..compute.requests.kinds import KINDS as SERVED_KINDS
from ..compute.requests.kinds import kind_of
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
        """The Triton models it is published as, as far as its name tells: those every kind
        of its library declares (a CLIP model's two towers; a sentence-transformers
        model's graph). Which others it has, its metadata says: ``parts_of``."""
        return kinds.first_parts(self.library, self.triton_name)

    def every_part(self) -> tuple[str, ...]:
        """Every Triton model a model of this name may be published as, whatever its kind,
        the first first (each kind declares its own: ``contract/kinds/``)."""
        return kinds.every_part(self.library, self.triton_name)

    def parts_of(self, metadata: ModelMetadata) -> tuple[str, ...]:
        """The Triton models the published model ``metadata`` describes is made of, as its
        kind says (a kind this gateway does not serve: those its name tells)."""
        if metadata.kind not in SERVED_KINDS:
            return self.parts()
        return kind_of(metadata).parts(self.triton_name)

    def owns(self, metadata: ModelMetadata | None) -> bool:
        """Whether ``metadata`` (a part's in the repository) is this model's."""
        if metadata is None or metadata.model_name != self.model_name:
            return False
        record = metadata.record
        return (record.pretrained_tag() if record is not None else None) == self.pretrained

    def described(self) -> str:
        return self.model_name if self.pretrained is None else f"{self.model_name} ({self.pretrained})"
