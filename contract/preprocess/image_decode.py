"""One untrusted image's bytes decoded, once they are known to be affordable.

The bytes come from anyone, so nothing is decoded before it is known to be affordable:
only a few formats are opened, the pixel count is read from the header and checked before
decoding, and a truncated file is refused rather than half decoded. Animated images give
their first frame. Pure Pillow: this module runs in the gateway's image threads and in the
converters' parity checks, before either preparation (``images.py`` for OpenCLIP models,
``processor_images.py`` for a Hugging Face image processor's).
"""

from __future__ import annotations

import io
import warnings

from PIL import Image, UnidentifiedImageError

# Formats with a bounded, well-trodden decoder; anything else is refused unopened.
ALLOWED_FORMATS = ("JPEG", "PNG", "GIF", "WEBP", "BMP")


class ImageRejected(Exception):
    """An image (or its source) that cannot be used, with a stable code and a reason."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def open_image(data: bytes, max_pixels: int) -> Image.Image:
    """``data`` decoded (its first frame), refused unless it is an image of an allowed
    format of at most ``max_pixels`` pixels."""
    image = _open(data, max_pixels)
    try:
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageRejected("invalid_image", f"the {image.format} data is truncated or corrupt") from error
    return image


def check_resize(image: Image.Image, width: int, height: int, target: str, max_pixels: int) -> None:
    """Refuses a resize to ``width`` x ``height`` past ``max_pixels``: an elongated image
    whose short side is scaled up would build a huge intermediate image."""
    if width * height > max_pixels:
        raise ImageRejected(
            "image_too_large",
            f"the image is {image.width}x{image.height} pixels: too elongated to resize to {target}",
        )


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
