"""Parity checks for a CLIP model: the published files must reproduce OpenCLIP.

The serving path is replayed with the gateway's own preprocessing modules (torch-free:
``api.preprocess.clip_text`` and ``api.preprocess.images``) on the published tokenizer and
metadata, and the exported graphs run under onnxruntime. Token ids must be identical to
OpenCLIP's tokenizer; embeddings must reach the cosine threshold against ``encode_text``
and ``encode_image(preprocess(image))``, once as one batch and once input by input.
The test images cover the decoder's cases: JPEG, PNG, GIF and WebP; landscape, portrait,
tiny and 1x1 images; grayscale, palette, alpha and CMYK modes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from embedgate.contract.errors import ParityError
from embedgate.contract.kinds.clip import AnyClipText, ImagePreprocessing
from embedgate.contract.spec import EMBEDDING, INPUT_IDS, PIXELS, ImageParityResult, ParityResult
from embedgate.converters.library.parity import Run, cosines, onnx_runner, parity_sentences

_CLIP_SENTENCES = (
    "a photo of a cat",
    "A DIAGRAM of &amp; HTML &lt;entities&gt; and &#39;quotes&#39;",
    "“curly quotes”, ‘apostrophes’, the ﬁ ligature and ＦＵＬＬ width",
    "it's they're we've I'll she'd I'm",
    "text with the <end_of_text> marker inside",
    "",
)
# Enough pixels for any test image; the gateway's own limit is a setting.
_UNLIMITED_PIXELS = 1 << 40


def clip_sentences(context_length: int) -> list[str]:
    return [*parity_sentences(context_length), *_CLIP_SENTENCES]


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
    return [
        ("landscape RGB JPEG", encode(picture(320, 200), "JPEG", quality=90)),
        ("portrait RGB PNG", encode(picture(97, 211), "PNG")),
        ("tiny RGB PNG", encode(picture(13, 7), "PNG")),
        ("1x1 PNG", encode(picture(1, 1), "PNG")),
        ("RGBA PNG", encode(rgba, "PNG")),
        ("grayscale PNG", encode(picture(150, 150).convert("L"), "PNG")),
        ("grayscale with alpha PNG", encode(picture(64, 80).convert("LA"), "PNG")),
        ("palette GIF", encode(picture(140, 100).convert("P", palette=Image.Palette.ADAPTIVE), "GIF")),
        ("CMYK JPEG", encode(picture(100, 130).convert("CMYK"), "JPEG", quality=90)),
        ("RGB WebP", encode(picture(90, 60), "WEBP", lossless=True)),
    ]


def check_tokenization(tokenizer_file: Path, text: AnyClipText, sentences: Sequence[str], expected: np.ndarray) -> np.ndarray:
    """The gateway's token ids for ``sentences``, which must equal OpenCLIP's ``expected``."""
    from embedgate.contract.preprocess.clip_text import clip_tokenizer

    ids = clip_tokenizer(tokenizer_file, text).encode(list(sentences)).input_ids
    for row, sentence in enumerate(sentences):
        if not np.array_equal(ids[row], expected[row]):
            raise ParityError(
                "the published tokenizer does not reproduce OpenCLIP's tokenization "
                f"(sentence {row + 1} of {len(sentences)}: {sentence[:40]!r})"
            )
    return ids


def check_text(
    graph: Path | Run, token_ids: np.ndarray, reference: np.ndarray, threshold: float, sentences: Sequence[str]
) -> ParityResult:
    """The text tower (an ONNX file, or a runner of another graph) against OpenCLIP's."""
    labels = [repr(sentence[:40]) for sentence in sentences]
    min_cosine = _min_cosine(graph, INPUT_IDS, token_ids, reference, threshold, labels)
    return ParityResult(passed=True, threshold=threshold, min_cosine=min_cosine, sentences=len(token_ids))


def gateway_pixels(images: Sequence[bytes], preprocessing: ImagePreprocessing) -> np.ndarray:
    from embedgate.contract.preprocess.images import prepare_image

    return np.stack([prepare_image(data, preprocessing, max_pixels=_UNLIMITED_PIXELS) for data in images])


def reference_pixels(images: Sequence[bytes], preprocess: Callable) -> list:
    from PIL import Image

    return [preprocess(Image.open(io.BytesIO(data))) for data in images]


def check_images(
    graph: Path | Run, pixels: np.ndarray, reference: np.ndarray, threshold: float, labels: Sequence[str]
) -> ImageParityResult:
    """The image tower (an ONNX file, or a runner of another graph) against OpenCLIP's."""
    min_cosine = _min_cosine(graph, PIXELS, pixels, reference, threshold, labels)
    return ImageParityResult(passed=True, threshold=threshold, min_cosine=min_cosine, images=len(pixels))


def _min_cosine(
    graph: Path | Run,
    input_name: str,
    inputs: np.ndarray,
    reference: np.ndarray,
    threshold: float,
    labels: Sequence[str],
) -> float:
    run = onnx_runner(graph, EMBEDDING) if isinstance(graph, Path) else graph
    batched = run({input_name: inputs})
    alone = np.concatenate([run({input_name: inputs[i : i + 1]}) for i in range(len(inputs))])
    if batched.shape != reference.shape:
        raise ParityError(
            f"the {input_name} graph's embeddings have shape {list(batched.shape)}, "
            f"OpenCLIP's {list(reference.shape)}"
        )
    checks = {"as one batch": cosines(batched, reference), "one at a time": cosines(alone, reference)}
    worst_check, values = min(checks.items(), key=lambda item: item[1].min())
    min_cosine = float(values.min())
    if min_cosine < threshold:
        raise ParityError(
            f"parity check failed: min cosine {min_cosine:.6f} < threshold {threshold} "
            f"({labels[int(values.argmin())]}, {worst_check})"
        )
    return min_cosine
