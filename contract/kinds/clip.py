"""An OpenCLIP model (CLIP, SigLIP, SigLIP2): text and image embeddings in one space, two
Triton models (the towers). It records how the gateway tokenizes for the text tower, as
OpenCLIP's tokenizer of the model does, and prepares an image for the image tower."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag

from embedgate.contract.kinds.base import Kind, KindRecord
from embedgate.contract.metadata_parts import GpuInfo, ImageParityResult

# A CLIP model is two Triton models: "<name>_text_encoder" and "<name>_image_encoder".
TEXT_ENCODER_SUFFIX = "_text_encoder"
IMAGE_ENCODER_SUFFIX = "_image_encoder"


def clip_part_names(triton_name: str) -> tuple[str, str]:
    """The Triton names of a CLIP model's (text, image) towers."""
    return triton_name + TEXT_ENCODER_SUFFIX, triton_name + IMAGE_ENCODER_SUFFIX


class ImagePreprocessing(BaseModel):
    """What the gateway does to a decoded image before the image tower: OpenCLIP's eval
    transform up to ``ToTensor`` (resize, crop or pad, RGB). Scaling to [0, 1] and the
    mean/std normalization are inside the image graph, so the gateway sends uint8 pixels."""

    height: int = Field(ge=1)
    width: int = Field(ge=1)
    # OpenCLIP's resize modes: "shortest" (resize the short side, center crop),
    # "longest" (resize the long side, pad with fill_color), "squash" (resize both sides).
    resize_mode: Literal["shortest", "longest", "squash"] = "shortest"
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    fill_color: int = 0
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


# OpenCLIP's text cleaning modes (open_clip.tokenizer.get_clean_fn).
ClipClean = Literal["lower", "whitespace", "canonicalize"]


class ClipText(BaseModel):
    """How the gateway tokenizes for the text tower, as OpenCLIP's SimpleTokenizer does."""

    # Metadata written before Hugging Face tokenizers were served has no such field.
    tokenizer: Literal["simple"] = "simple"
    context_length: int = Field(ge=2)
    sot_token_id: int
    eot_token_id: int
    # SimpleTokenizer's cleaning and the pattern that splits cleaned text into words
    # (matched case-insensitively).
    clean: ClipClean = "lower"
    word_pattern: str


class ClipsLayout(BaseModel):
    """HFTokenizer's tokenizer_mode "clips": the text's tokens (no special tokens, at most
    context_length - 3) between the begin and end tokens, padded, and the class token in
    the last place."""

    bos_token_id: int
    eos_token_id: int
    cls_token_id: int


class HFClipText(BaseModel):
    """How the gateway tokenizes for the text tower, as OpenCLIP's HFTokenizer does (SigLIP,
    SigLIP2 and others): clean the text, then run the Hugging Face tokenizer saved as
    tokenizer.json with its special tokens, truncated and padded to the context length."""

    tokenizer: Literal["hf"] = "hf"
    context_length: int = Field(ge=2)
    clean: ClipClean = "whitespace"
    pad_token_id: int
    # The Hugging Face tokenizer's own settings, which transformers applies around
    # tokenizer.json: which end is cut and which end is padded, and whether special tokens
    # written in a text are split like words.
    truncation_side: Literal["right", "left"] = "right"
    padding_side: Literal["right", "left"] = "right"
    split_special_tokens: bool = False
    # strip_sep_token: OpenCLIP sets every occurrence of this id (the separator) to 0.
    strip_sep_token_id: int | None = None
    # tokenizer_mode "clips" (None: the standard mode above).
    clips: ClipsLayout | None = None


def _clip_tokenizer_kind(value: Any) -> str:
    if isinstance(value, dict):
        return value.get("tokenizer", "simple")
    return getattr(value, "tokenizer", "simple")


# The text tokenization of a CLIP model, by the kind of tokenizer OpenCLIP gives it.
AnyClipText = Annotated[
    Annotated[ClipText, Tag("simple")] | Annotated[HFClipText, Tag("hf")],
    Discriminator(_clip_tokenizer_kind),
]


class ClipMetadata(KindRecord):
    """An OpenCLIP model's own record. ModelMetadata's max_seq_length is then the context
    length, and its parity the text tower's."""

    key = "clip"

    pretrained: str
    text: AnyClipText
    image: ImagePreprocessing
    image_parity: ImageParityResult
    # GPU instances: the image tower's TorchScript graph (the text tower's is ModelMetadata.gpu).
    image_gpu: GpuInfo | None = None

    def pretrained_tag(self) -> str | None:
        return self.pretrained


# A load names the library (its own kind: no class to read from a directory); its models
# have no prompts.
KIND = Kind("clip", record=ClipMetadata, library="open_clip", prompts=False, part_names=clip_part_names)
