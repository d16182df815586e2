"""A multimodal sentence-transformer: a ``SentenceTransformer`` whose one ``Transformer``
takes images beside texts through its processor (sentence-transformers 6's form of CLIP and
SigLIP models), text and image embeddings in one space. Two Triton models: the text graph
(with the tokenizer) and the image graph beside it.

It records which modalities it takes, how the gateway prepares an image as the model's own
image processor does (the steps before rescaling and normalization, which are inside the
image graph), and the image graph's parity against the library."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from embedgate.contract.kinds.base import Kind, KindRecord
from embedgate.contract.metadata_parts import GpuInfo, ImageParityResult

# The image graph's Triton name is the model's with this after it. "---" joins a variant's
# name otherwise ("<name>---int8"), and "image" is no variant: no other model is named so.
IMAGE_PART_SUFFIX = "---image"


def multimodal_part_names(triton_name: str) -> tuple[str, str]:
    """The Triton names of a multimodal model's (text, image) graphs."""
    return triton_name, triton_name + IMAGE_PART_SUFFIX


class ProcessorImages(BaseModel):
    """What the gateway does to a decoded image before the image graph, replaying a Hugging
    Face image processor (the ``preprocess`` of its torchvision or PIL backend, as
    ``CLIPImageProcessor`` and ``SiglipImageProcessor`` inherit it): RGB (transparency
    composited onto white), resize, center crop (padding with black where the image is
    smaller). Rescaling and the mean/std normalization are inside the image graph, so the
    gateway sends uint8 pixels ``[height, width, 3]``."""

    # Tells this record from OpenCLIP's preparation where both may stand (a route's images).
    preparation: Literal["processor"] = "processor"
    # The image processor's class, for messages and the listing.
    processor: str
    # Which backend's resize is replayed: torchvision's uint8 resampling (fixed-point weights
    # of at most 16 bits) or Pillow's own.
    backend: Literal["torchvision", "pil"]
    # The resize: the short side to ``shortest_edge`` (the long side in proportion, truncated),
    # or both sides to ``resize_height`` x ``resize_width``; None: no resize.
    shortest_edge: int | None = Field(None, ge=1)
    resize_height: int | None = Field(None, ge=1)
    resize_width: int | None = Field(None, ge=1)
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    # The center crop's (height, width); None: no crop.
    crop_height: int | None = Field(None, ge=1)
    crop_width: int | None = Field(None, ge=1)
    # What the image graph takes: every image is this size once prepared.
    height: int = Field(ge=1)
    width: int = Field(ge=1)
    # Inside the graph: pixels times ``rescale`` (None: not rescaled), then less ``mean`` and
    # over ``std`` (None: not normalized).
    rescale: float | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None


class MultimodalMetadata(KindRecord):
    """A multimodal sentence-transformer's own record. ModelMetadata's max_seq_length and
    parity are its text graph's."""

    key = "multimodal"

    # What it takes, as sentence-transformers names the Transformer's modalities.
    modalities: list[str]
    image: ProcessorImages
    image_parity: ImageParityResult
    # The largest difference between the gateway's prepared pixels, normalized as the graph
    # normalizes them, and the pixel values the model's own processor gives (0 where the
    # replay is exact; float rounding otherwise).
    pixel_max_error: float
    # GPU instances: the image graph's TorchScript graph (the text graph's is ModelMetadata.gpu).
    image_gpu: GpuInfo | None = None


KIND = Kind(
    "multimodal", record=MultimodalMetadata, library_class="SentenceTransformer", takes_images=True,
    part_names=multimodal_part_names,
)
