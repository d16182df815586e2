"""A decoded image prepared as a Hugging Face image processor prepares it, up to rescaling.

The processors sentence-transformers' multimodal ``Transformer`` hands images to
(``CLIPImageProcessor``, ``SiglipImageProcessor``...) run one ``preprocess``, inherited from
their backend: RGB first (transparency composited onto white), then the resize, then the
center crop, then rescaling and normalization in float. The first three are replayed here
in their order (the last two are the image graph's first nodes): the resize as the
backend's own (torchvision's uint8 kernel, ``resample.py``, or Pillow's ``Image.resize``),
the crop's offsets and its padding (black, where the image is smaller) as each backend
places them. The converter checks the replay against the processor's own pixel values.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from embedgate.contract.kinds.multimodal import ProcessorImages
from embedgate.contract.preprocess import resample
from embedgate.contract.preprocess.image_decode import ImageRejected, check_resize

_PILLOW = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
_WHITE = (255, 255, 255, 255)


def prepare_processor_image(image: Image.Image, spec: ProcessorImages, *, max_pixels: int) -> np.ndarray:
    """uint8 pixels ``[spec.height, spec.width, 3]`` of a decoded ``image``."""
    mode = image.mode
    try:
        pixels = np.asarray(rgb(image), dtype=np.uint8)
    except (OSError, ValueError) as error:
        raise ImageRejected("invalid_image", f"images in mode {mode} are not supported") from error
    height, width = resized_size(pixels.shape[0], pixels.shape[1], spec)
    check_resize(image, width, height, f"{spec.width}x{spec.height}", max_pixels)
    if (height, width) != pixels.shape[:2]:
        if spec.backend == "torchvision":
            pixels = resample.resize(pixels, height, width, spec.interpolation)
        else:
            resized = Image.fromarray(pixels).resize((width, height), _PILLOW[spec.interpolation])
            pixels = np.asarray(resized, dtype=np.uint8)
    if spec.crop_height is not None and spec.crop_width is not None:
        pixels = center_crop(pixels, spec.crop_height, spec.crop_width, spec.backend)
    return np.ascontiguousarray(pixels)


def rgb(image: Image.Image) -> Image.Image:
    """transformers' ``convert_to_rgb``: an image with transparency (an alpha band, or a
    transparent palette entry) composited onto white; any other converted."""
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        background = Image.new("RGBA", image.size, _WHITE)
        return Image.alpha_composite(background, image.convert("RGBA")).convert("RGB")
    return image.convert("RGB")


def resized_size(height: int, width: int, spec: ProcessorImages) -> tuple[int, int]:
    """(height, width) after the processor's resize (unchanged where it has none)."""
    if spec.shortest_edge is not None:
        # transformers' get_resize_output_image_size(default_to_square=False): the short side
        # becomes the size, the long side in proportion, truncated.
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = spec.shortest_edge, int(spec.shortest_edge * long / short)
        return (new_long, new_short) if width <= height else (new_short, new_long)
    if spec.resize_height is not None and spec.resize_width is not None:
        return spec.resize_height, spec.resize_width
    return height, width


def center_crop(pixels: np.ndarray, height: int, width: int, backend: str) -> np.ndarray:
    """The processor's center crop of ``pixels`` to ``height`` x ``width``, padded with black
    where the image is smaller: torchvision's pads put the odd pixel after, the PIL
    backend's before."""
    rows, columns = pixels.shape[:2]
    if height > rows or width > columns:
        pad_rows, pad_columns = max(height - rows, 0), max(width - columns, 0)
        if backend == "torchvision":
            top, left = pad_rows // 2, pad_columns // 2
        else:
            top, left = math.ceil(pad_rows / 2), math.ceil(pad_columns / 2)
        padded = np.zeros((rows + pad_rows, columns + pad_columns, pixels.shape[2]), dtype=pixels.dtype)
        padded[top : top + rows, left : left + columns] = pixels
        pixels = padded
        rows, columns = pixels.shape[:2]
    top, left = (rows - height) // 2, (columns - width) // 2
    return pixels[top : top + height, left : left + width]
