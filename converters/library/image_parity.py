"""Parity checks of an image graph: the published graph, fed the gateway's own preparation
of a fixed set of images, must reproduce the model's library (OpenCLIP's ``encode_image``,
a multimodal sentence-transformer's ``encode``), once as one batch and once image by image.

The images cover the decoder's and the preparations' cases: JPEG, PNG, GIF and WebP;
landscape, portrait, tiny and 1x1 images; grayscale, palette, alpha, a transparent palette
entry and CMYK modes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedgate.contract.errors import ParityError
from embedgate.contract.spec import EMBEDDING, PIXELS, ImageParityResult
from embedgate.converters.library.parity import Run, cosines, onnx_runner

# Enough pixels for any test image; the gateway's own limit is a setting.
UNLIMITED_PIXELS = 1 << 40


def parity_images() -> list[tuple[str, bytes]]:
    """(description, encoded bytes) of deterministic synthetic images."""
    from PIL import Image

    rng = np.random.default_rng(0)

    def picture(width: int, height: int) -> Image.Image:
        # Smooth gradients plus noise: resampling has structure to work on.
        y, x = np.mgrid[0:height, 0:width]
        channels = [(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)), ((x + y) * 7) % 256]
        noise = rng.integers(0, 40, size=(height, width, 3))
        return Image.fromarray(np.clip(np.stack(channels, axis=-1) + noise, 0, 255).astype(np.uint8))

    def encode(image: Image.Image, fmt: str, **options) -> bytes:
        buffer = io.BytesIO()
        image.save(buffer, format=fmt, **options)
        return buffer.getvalue()

    rgba = picture(120, 90).convert("RGBA")
    rgba.putalpha(Image.fromarray(rng.integers(0, 256, size=(90, 120), dtype=np.uint8)))
    transparent = picture(70, 110).convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    return [
        ("landscape RGB JPEG", encode(picture(320, 200), "JPEG", quality=90)),
        ("portrait RGB PNG", encode(picture(97, 211), "PNG")),
        ("tiny RGB PNG", encode(picture(13, 7), "PNG")),
        ("1x1 PNG", encode(picture(1, 1), "PNG")),
        ("RGBA PNG", encode(rgba, "PNG")),
        ("grayscale PNG", encode(picture(150, 150).convert("L"), "PNG")),
        ("grayscale with alpha PNG", encode(picture(64, 80).convert("LA"), "PNG")),
        ("palette GIF", encode(picture(140, 100).convert("P", palette=Image.Palette.ADAPTIVE), "GIF")),
        ("palette PNG with a transparent entry", encode(transparent, "PNG", transparency=3)),
        ("CMYK JPEG", encode(picture(100, 130).convert("CMYK"), "JPEG", quality=90)),
        ("RGB WebP", encode(picture(90, 60), "WEBP", lossless=True)),
    ]


def gateway_pixels(images: Sequence[bytes], preparation) -> np.ndarray:
    """uint8 ``[n, height, width, 3]``: the images as the gateway prepares them."""
    from embedgate.contract.preprocess.images import prepare_image

    return np.stack([prepare_image(data, preparation, max_pixels=UNLIMITED_PIXELS) for data in images])


def decoded(images: Sequence[bytes]) -> list:
    """The images as ``PIL.Image.open`` gives them (what a user hands the library)."""
    from PIL import Image

    return [Image.open(io.BytesIO(data)) for data in images]


def check_images(
    graph: Path | Run, pixels: np.ndarray, reference: np.ndarray, threshold: float, labels: Sequence[str]
) -> ImageParityResult:
    """The image graph (an ONNX file, or a runner of another graph) against the library's."""
    lowest = min_cosine(graph, PIXELS, pixels, reference, threshold, labels)
    return ImageParityResult(passed=True, threshold=threshold, min_cosine=lowest, images=len(pixels))


def min_cosine(
    graph: Path | Run,
    input_name: str,
    inputs: np.ndarray,
    reference: np.ndarray,
    threshold: float,
    labels: Sequence[str],
) -> float:
    """The lowest cosine of ``graph``'s outputs for ``inputs`` (as one batch, and one at a
    time) against ``reference``; a ParityError below ``threshold``, naming the input."""
    run = onnx_runner(graph, EMBEDDING) if isinstance(graph, Path) else graph
    batched = run({input_name: inputs})
    alone = np.concatenate([run({input_name: inputs[i : i + 1]}) for i in range(len(inputs))])
    if batched.shape != reference.shape:
        raise ParityError(
            f"the {input_name} graph's embeddings have shape {list(batched.shape)}, "
            f"the library's {list(reference.shape)}"
        )
    checks = {"as one batch": cosines(batched, reference), "one at a time": cosines(alone, reference)}
    worst_check, values = min(checks.items(), key=lambda item: item[1].min())
    lowest = float(values.min())
    if lowest < threshold:
        raise ParityError(
            f"parity check failed: min cosine {lowest:.6f} < threshold {threshold} "
            f"({labels[int(values.argmin())]}, {worst_check})"
        )
    return lowest
