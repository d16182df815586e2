"""One untrusted image in, the uint8 pixels a CLIP image tower takes out.

The preparation replays OpenCLIP's eval transform up to ``ToTensor`` in its own order
(resize, center crop or pad, then ``convert("RGB")``), with the same size arithmetic as
torchvision, so that a served embedding matches ``encode_image(preprocess(Image.open(f)))``.
Scaling to [0, 1] and the mean/std normalization happen inside the image graph.

The bytes come from anyone, so nothing is decoded before it is known to be affordable:
only a few formats are opened, the pixel count is read from the header and checked before
decoding, a resize that would build a huge intermediate image (a 1x10000 strip resized to
224 on its short side) is refused, and a truncated file is refused rather than half
decoded. Animated images contribute their first frame. Pure Pillow and numpy: this module
runs in the gateway's image threads and in the converter's parity check.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from embedgate.contract.kinds.clip import ImagePreprocessing

# Formats with a bounded, well-trodden decoder; anything else is refused unopened.
ALLOWED_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP")
_RESAMPLING = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}


class ImageRejected(Exception):
    """An image (or its source) that cannot be used, with a stable code and a reason."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def prepare_image(data: bytes, spec: ImagePreprocessing, *, max_pixels: int) -> np.ndarray:
    """Decode ``data`` and return uint8 pixels ``[spec.height, spec.width, 3]``."""
    image = _open(data, max_pixels)
    try:
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageRejected("invalid_image", f"the {image.format} data is truncated or corrupt") from error
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


def _open(data: bytes, max_pixels: int) -> Image.Image:
    if not data:
        raise ImageRejected("invalid_image", "the image is empty")
    try:
        with warnings.catch_warnings():
            # Pillow warns (and past twice its own limit, raises) about huge images; the
            # pixel limit below is the one that decides.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except Image.DecompressionBombError as error:
        raise ImageRejected("image_too_large", f"the image has too many pixels ({error})") from error
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise ImageRejected(
            "invalid_image", f"not an image in a supported format ({', '.join(ALLOWED_FORMATS)})"
        ) from error
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageRejected("invalid_image", f"the image is {width}x{height} pixels")
    if width * height > max_pixels:
        raise ImageRejected(
            "image_too_large", f"the image is {width}x{height} pixels, more than the limit of {max_pixels}"
        )
    return image


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
    if width * height > max_pixels:
        raise ImageRejected(
            "image_too_large",
            f"the image is {image.width}x{image.height} pixels: too elongated to resize to "
            f"{spec.width}x{spec.height}",
        )
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
