"""A vision-language sentence-transformer: a ``SentenceTransformer`` whose one
``Transformer`` renders every input through its processor's chat template (a Qwen2-VL-style
model: Qwen3-VL-Embedding and its kind), an image as a run of image tokens inside the text.
Two Triton models: the language graph (with the tokenizer), which embeds token ids and the
image rows put at the image tokens, and the vision graph beside it, which makes one image's
rows of its patches (Qwen2-VL's form; Qwen2.5-VL's, whose vision layers attend within
windows; Qwen3-VL's, with its learned position grid and deepstack rows).

It records how the gateway makes the library's token ids without a template engine (the
template's fixed text around an input, and the tokens truncation keeps at the end), how it
cuts an image into patches as the model's image processor does, and both graphs' parity."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from embedgate.contract.kinds.base import Kind, KindRecord
from embedgate.contract.metadata_parts import ImageParityResult

# The vision graph's Triton name is the model's with this after it (as a multimodal model's image graph).
VISION_PART_SUFFIX = "---image"
# The graphs' tensors. Vision: one image's patches, their (row, column), and where the model
# has them, its position grid's taps and weights and each patch's attention window; out, the
# image rows. Language: the token ids, the mask, the positions and the batch's image rows.
PATCHES = "patches"
POSITION_IDS = "position_ids"
INTERP_INDICES = "interp_indices"
INTERP_WEIGHTS = "interp_weights"
WINDOW_IDS = "window_ids"
IMAGE_EMBEDS = "image_embeds"


def vision_language_part_names(triton_name: str) -> tuple[str, str]:
    """The Triton names of a vision-language model's (language, vision) graphs."""
    return triton_name, triton_name + VISION_PART_SUFFIX


class PatchImages(BaseModel):
    """What the gateway needs of a Qwen2-VL-style image processor
    (``contract/preprocess/vision_language_images.py``): the resize to multiples of
    ``patch_size * merge_size`` within ``min_pixels`` and ``max_pixels``, the patches, and
    (inside the vision graph) the rescaling, normalization and temporal repeat."""

    # Tells this record from the other image preparations where a route holds one.
    preparation: Literal["patches"] = "patches"
    patch_size: int = Field(ge=1)
    merge_size: int = Field(ge=1)
    temporal_patch_size: int = Field(ge=1)
    min_pixels: int = Field(ge=1)
    max_pixels: int = Field(ge=1)
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    rescale: float

    def tokens(self, grid: tuple[int, int, int]) -> int:
        """The image tokens an image of ``grid`` (t, h, w) patches takes: one per merged patch."""
        frames, height, width = grid
        return frames * height * width // (self.merge_size * self.merge_size)


class Frame(BaseModel):
    """The chat template's fixed text around an input: ``before`` + the prompt + ``between``
    + the input + ``after`` (``between`` unused without a prompt)."""

    before: str
    between: str = ""
    after: str

    def render(self, text: str, prompt: str = "") -> str:
        return f"{self.before}{prompt}{self.between}{text}{self.after}"


class MessageTemplate(BaseModel):
    """How the model's chat template renders a text and an image as the library builds their
    messages, with and without a prompt (a system message), and what truncation keeps."""

    text: Frame
    prompted: Frame
    # What the template writes for one image in place of a text: the image token once, to be
    # repeated once per image token the image takes.
    image: str
    image_token: str
    image_token_id: int = Field(ge=0)
    # The template's last tokens, which the library writes back over the end of a text cut at
    # the max length (``Transformer._restore_chat_template_suffix``).
    suffix_ids: list[int]
    # Whether it writes the parts of one input (texts and images, in their order) one after
    # another, as for one part: an input of several parts is then served (one embedding of
    # them together), else refused.
    parts_joined: bool = False

    def text_of(self, text: str, prompt: str = "") -> str:
        return self.prompted.render(text, prompt) if prompt else self.text.render(text)

    def parts_of(self, parts: list[str | int], prompt: str = "") -> str:
        """The rendered text of an input of ``parts``: texts, and images as the image tokens
        each takes, in their order."""
        return self.text_of("".join(part if isinstance(part, str) else self._image(part) for part in parts), prompt)

    def _image(self, tokens: int) -> str:
        return self.image.replace(self.image_token, self.image_token * tokens)


class VisionLanguageMetadata(KindRecord):
    """A vision-language model's own record. ModelMetadata's max_seq_length and parity are
    its texts' (through the language graph)."""

    key = "vision_language"

    # What it takes, as sentence-transformers names the Transformer's modalities.
    modalities: list[str]
    template: MessageTemplate
    images: PatchImages
    # The width of an image token's row (the language model's hidden size).
    image_hidden: int = Field(ge=1)
    # The vision graph's rows per image token: the merged rows, then one per deepstack level
    # (Qwen3-VL: rows from inner vision layers, added to the first language layers).
    image_levels: int = Field(1, ge=1)
    # The side of the vision tower's learned position grid, resampled per image by the
    # gateway (Qwen3-VL); 0: none.
    position_grid: int = Field(0, ge=0)
    # The side, in pixels, of the windows some of the vision tower's layers attend within
    # (Qwen2.5-VL); 0: none.
    window_size: int = Field(0, ge=0)
    image_parity: ImageParityResult
    # The largest difference between the gateway's patches, normalized as the vision graph
    # normalizes them, and the pixel values the model's own processor gives.
    pixel_max_error: float


KIND = Kind(
    "vision_language", record=VisionLanguageMetadata, library_class="SentenceTransformer", takes_images=True,
    renders_messages=True, part_names=vision_language_part_names,
)
