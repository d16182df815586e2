"""Image preparation: the gateway's pixels must equal OpenCLIP's own transform (before
normalization, which is in the graph), and untrusted bytes are refused with a reason."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from embedgate.contract.kinds.clip import ImagePreprocessing
from embedgate.contract.preprocess.images import ImageRejected, prepare_image
from embedgate.converters.kinds.clip.parity import parity_images

MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)
LIMIT = 50_000_000


def spec(height=32, width=32, **options) -> ImagePreprocessing:
    return ImagePreprocessing(height=height, width=width, mean=MEAN, std=STD, **options)


def encode(image: Image.Image, fmt: str = "PNG", **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def open_clip_pixels(data: bytes, preprocessing: ImagePreprocessing) -> np.ndarray:
    """OpenCLIP's eval transform without its normalization, back in uint8 HWC."""
    from open_clip.transform import image_transform

    transform = image_transform(
        (preprocessing.height, preprocessing.width),
        is_train=False,
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
        resize_mode=preprocessing.resize_mode,
        interpolation=preprocessing.interpolation,
        fill_color=preprocessing.fill_color,
    )
    tensor = transform(Image.open(io.BytesIO(data)))
    return (tensor.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)


PREPROCESSING = {
    "shortest, square": spec(32, 32),
    "shortest, not square": spec(48, 64),
    "longest, padded": spec(48, 64, resize_mode="longest", fill_color=7),
    "squash": spec(40, 24, resize_mode="squash"),
    "bilinear": spec(32, 32, interpolation="bilinear"),
}


@pytest.mark.parametrize("preprocessing", PREPROCESSING.values(), ids=PREPROCESSING.keys())
@pytest.mark.parametrize("label, data", parity_images(), ids=[label for label, _ in parity_images()])
def test_pixels_equal_open_clip_transform(label, data, preprocessing):
    ours = prepare_image(data, preprocessing, max_pixels=LIMIT)
    assert ours.dtype == np.uint8 and ours.shape == (preprocessing.height, preprocessing.width, 3)
    np.testing.assert_array_equal(ours, open_clip_pixels(data, preprocessing))


def test_an_animated_gif_contributes_its_first_frame():
    frames = [Image.new("RGB", (40, 40), color) for color in ((250, 10, 10), (10, 250, 10), (10, 10, 250))]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    pixels = prepare_image(buffer.getvalue(), spec(), max_pixels=LIMIT)
    assert pixels[..., 0].mean() > 200 and pixels[..., 1].mean() < 50


def test_exif_orientation_is_left_as_open_clip_leaves_it():
    image = Image.new("RGB", (60, 30), (200, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90": OpenCLIP does not apply it, so neither do we
    data = encode(image, "JPEG", exif=exif)
    np.testing.assert_array_equal(prepare_image(data, spec(), max_pixels=LIMIT), open_clip_pixels(data, spec()))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares a size and carries almost no data: a decompression-bomb shape."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def truncated(data: bytes) -> bytes:
    return data[: len(data) * 2 // 3]


def rgb(width: int, height: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(1).integers(0, 255, (height, width, 3), dtype=np.uint8))


@pytest.mark.parametrize(
    "data, code, message",
    [
        (b"", "invalid_image", "empty"),
        (b"<html>not an image</html>", "invalid_image", "not an image"),
        (b"GIF89a" + b"\0" * 10, "invalid_image", "not an image"),
        (encode(rgb(20, 20), "TIFF"), "invalid_image", "supported format"),
        (truncated(encode(rgb(300, 200), "PNG")), "invalid_image", "truncated"),
        (truncated(encode(rgb(300, 200), "JPEG")), "invalid_image", "truncated"),
        (png_header_only(3000, 3000), "image_too_large", "3000x3000"),
        (png_header_only(40000, 40000), "image_too_large", "pixels"),  # past Pillow's own bomb limit
        (encode(rgb(1, 5000)), "image_too_large", "too elongated"),
    ],
    ids=["empty", "html", "bad-gif", "tiff", "truncated-png", "truncated-jpeg", "too-many-pixels", "bomb", "strip"],
)
def test_unusable_images_are_refused_with_a_reason(data, code, message):
    with pytest.raises(ImageRejected) as caught:
        prepare_image(data, spec(), max_pixels=1_000_000)
    assert caught.value.code == code
    assert message in caught.value.reason


MODES = {
    "1": lambda: encode(rgb(50, 40).convert("1")),
    "L": lambda: encode(rgb(50, 40).convert("L")),
    "LA": lambda: encode(rgb(50, 40).convert("LA")),
    "P": lambda: encode(rgb(50, 40).convert("P")),
    "P with transparency": lambda: encode(rgb(50, 40).convert("P"), transparency=3),
    "RGBA": lambda: encode(rgb(50, 40).convert("RGBA")),
    "I;16": lambda: encode(Image.fromarray(np.arange(2000, dtype=np.uint16).reshape(40, 50) * 30)),
    "CMYK": lambda: encode(rgb(50, 40).convert("CMYK"), "JPEG"),
}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_of_the_allowed_formats_is_served_as_open_clip_serves_it(mode):
    data = MODES[mode]()
    pixels = prepare_image(data, spec(), max_pixels=LIMIT)
    assert pixels.shape == (32, 32, 3) and pixels.dtype == np.uint8
    np.testing.assert_array_equal(pixels, open_clip_pixels(data, spec()))


def test_a_1x1_image_is_resized_like_any_other():
    data = encode(Image.new("RGB", (1, 1), (10, 200, 30)))
    pixels = prepare_image(data, spec(), max_pixels=LIMIT)
    assert (pixels == (10, 200, 30)).all()
