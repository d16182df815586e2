"""A decoded image prepared as a Qwen2-VL-style image processor prepares it, up to
rescaling: RGB (transparency onto white), the resize to a size of its own (``smart_resize``:
both sides multiples of ``patch_size * merge_size``, the area within ``min_pixels`` and
``max_pixels``, the aspect kept as closely as that allows; torchvision's uint8 bicubic
kernel, ``resample.py``), then cut into ``patch_size`` squares laid out as the processor
lays them out (``merge_size`` x ``merge_size`` blocks, row after row of blocks; each patch
its channels, then rows, then columns). Rescaling, normalizing and the repetition of an
image over ``temporal_patch_size`` frames are the vision graph's first nodes, so the
gateway sends uint8.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from embedgate.contract.kinds.vision_language import PatchImages
from embedgate.contract.preprocess import resample
from embedgate.contract.preprocess.processor_images import rgb

# The processor's limit on an image's aspect (longer over shorter side).
MAX_ASPECT = 200


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) the processor resizes an image of ``height`` x ``width`` to."""
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise ValueError(f"an image's longer side may be at most {MAX_ASPECT} times its shorter one")
    rows, columns = round(height / factor) * factor, round(width / factor) * factor
    if rows * columns > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        rows = max(factor, math.floor(height / beta / factor) * factor)
        columns = max(factor, math.floor(width / beta / factor) * factor)
    elif rows * columns < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        rows, columns = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return rows, columns


def prepare_patches(image: Image.Image, spec: PatchImages) -> tuple[np.ndarray, tuple[int, int, int]]:
    """uint8 ``[patches, 3 * patch_size ** 2]`` of a decoded ``image``, and its grid (t, h, w)."""
    pixels = np.asarray(rgb(image), dtype=np.uint8)
    height, width = resized(pixels.shape[0], pixels.shape[1], spec)
    if (height, width) != pixels.shape[:2]:
        pixels = resample.resize(pixels, height, width, "bicubic")
    return patches_of(pixels, spec.patch_size, spec.merge_size)


def resized(height: int, width: int, spec: PatchImages) -> tuple[int, int]:
    """(height, width) an image of ``height`` x ``width`` is resized to (ValueError: its aspect is refused)."""
    return smart_resize(height, width, spec.patch_size * spec.merge_size, spec.min_pixels, spec.max_pixels)


def patches_of(pixels: np.ndarray, patch: int, merge: int) -> tuple[np.ndarray, tuple[int, int, int]]:
    """``pixels [height, width, 3]`` (sides multiples of ``patch * merge``) as patches."""
    height, width, channels = pixels.shape
    rows, columns = height // patch, width // patch
    blocks = pixels.transpose(2, 0, 1).reshape(channels, rows // merge, merge, patch, columns // merge, merge, patch)
    laid = blocks.transpose(1, 4, 2, 5, 0, 3, 6).reshape(rows * columns, channels * patch * patch)
    return np.ascontiguousarray(laid), (1, rows, columns)
