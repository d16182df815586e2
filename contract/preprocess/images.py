"""One untrusted image in, the uint8 pixels a model's image graph takes out.

For an OpenCLIP model the preparation replays OpenCLIP's eval transform up to ``ToTensor``
in its own order (resize, center crop or pad, then ``convert("RGB")``), with the same size
arithmetic as torchvision, so that a served embedding matches
``encode_image(preprocess(Image.open(f)))``. A multimodal sentence-transformer's image is
prepared as its Hugging Face image processor prepares it (``processor_images.py``). Scaling
to [0, 1] and the mean/std normalization happen inside the image graph.

The image is decoded only once it is known to be affordable (``image_decode.py``), and a
resize that would build a huge intermediate image (a 1x10000 strip resized to 224 on its
short side) is refused. Pure Pillow and numpy: this module runs in the gateway's image
threads and in the converters' parity checks.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageOps

from embedgate.contract.kinds.clip import ImagePreprocessing
from embedgate.contract.kinds.multimodal import ProcessorImages
from embedgate.contract.kinds.vision_language import PatchImages
from embedgate.contract.preprocess.image_decode import ALLOWED_FORMATS, ImageRejected, check_resize, open_image
from embedgate.contract.preprocess.processor_images import prepare_processor_image
from embedgate.contract.preprocess.vision_language_images import prepare_patches, resized

__all__ = [
    "ALLOWED_FORMATS", "AnyImagePreparation", "ImageRejected", "Patches", "prepare_image", "prepare_patched_image",
    "resized_size",
]

_RESAMPLING = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
# How an image is prepared: OpenCLIP's transform, a Hugging Face image processor's, or a
# vision-language model's patches.
AnyImagePreparation = ImagePreprocessing | ProcessorImages | PatchImages
# A vision-language model's image: uint8 patches [patches, 3 * patch_size ** 2] and its grid (t, h, w).
Patches = tuple[np.ndarray, tuple[int, int, int]]


def prepare_image(data: bytes, spec: AnyImagePreparation, *, max_pixels: int) -> np.ndarray:
    """Decode ``data`` and return uint8 pixels ``[spec.height, spec.width, 3]``."""
    image = open_image(data, max_pixels)
    if isinstance(spec, ProcessorImages):
        return prepare_processor_image(image, spec, max_pixels=max_pixels)
    mode = image.mode
    try:
        image = _resize(image, spec, max_pixels)
        if spec.resize_mode != "squash":
            # torchvision's CenterCrop pads with 0; OpenCLIP's CenterCropOrPad with fill_color.
            fill = spec.fill_color if spec.resize_mode == "longest" else 0
            image = _center_crop_or_pad(image, spec.height, spec.width, fill)
        rgb = image.convert("RGB")
    except (OSError, ValueError) as error:
        raise ImageRejected("invalid_image", f"images in mode {mode} are not supported") from error
    return np.asarray(rgb, dtype=np.uint8)


def prepare_patched_image(data: bytes, spec: PatchImages, *, max_pixels: int) -> Patches:
    """Decode ``data`` and cut it into patches as the model's image processor does
    (``vision_language_images.py``)."""
    image = open_image(data, max_pixels)
    mode = image.mode
    try:
        height, width = resized(image.height, image.width, spec)
        check_resize(image, width, height, f"{width}x{height}", max_pixels)
        return prepare_patches(image, spec)
    except ValueError as error:  # its aspect, past the processor's limit
        raise ImageRejected("invalid_image", str(error)) from error
    except OSError as error:
        raise ImageRejected("invalid_image", f"images in mode {mode} are not supported") from error


def resized_size(width: int, height: int, spec: ImagePreprocessing) -> tuple[int, int]:
    """(width, height) after OpenCLIP's resize step, computed as torchvision computes it."""
    if spec.resize_mode == "squash":
        return spec.width, spec.height
    if spec.resize_mode == "shortest" and spec.height == spec.width:
        # torchvision Resize(int): the short side becomes the size, the long side is truncated.
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = spec.height, int(spec.height * long / short)
        return (new_short, new_long) if width <= height else (new_long, new_short)
    # OpenCLIP's ResizeKeepRatio: the short side ("shortest") or long side ("longest") fits.
    ratio_h, ratio_w = height / spec.height, width / spec.width
    ratio = max(ratio_h, ratio_w) if spec.resize_mode == "longest" else min(ratio_h, ratio_w)
    return round(width / ratio), round(height / ratio)


def _resize(image: Image.Image, spec: ImagePreprocessing, max_pixels: int) -> Image.Image:
    width, height = resized_size(image.width, image.height, spec)
    check_resize(image, width, height, f"{spec.width}x{spec.height}", max_pixels)
    if (width, height) == image.size:
        return image
    return image.resize((width, height), _RESAMPLING[spec.interpolation])


def _center_crop_or_pad(image: Image.Image, height: int, width: int, fill: int) -> Image.Image:
    if width > image.width or height > image.height:
        left = (width - image.width) // 2 if width > image.width else 0
        top = (height - image.height) // 2 if height > image.height else 0
        right = (width - image.width + 1) // 2 if width > image.width else 0
        bottom = (height - image.height + 1) // 2 if height > image.height else 0
        bands = len(image.getbands())
        palette = image.getpalette() if image.mode == "P" else None
        image = ImageOps.expand(image, border=(left, top, right, bottom), fill=(fill,) * bands if bands > 1 else fill)
        if palette is not None:
            image.putpalette(palette)
        if image.size == (width, height):
            return image
    top = int(round((image.height - height) / 2.0))
    left = int(round((image.width - width) / 2.0))
    return image.crop((left, top, left + width, top + height))
