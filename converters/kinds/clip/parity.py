"""Parity checks for a CLIP model: the published files must reproduce OpenCLIP.

The serving path is replayed with the gateway's own preprocessing modules (torch-free:
``contract/preprocess/clip_text.py`` and ``images.py``) on the published tokenizer and
metadata, and the exported graphs run under onnxruntime. Token ids must be identical to
OpenCLIP's tokenizer; embeddings must reach the cosine threshold against ``encode_text``
and ``encode_image(preprocess(image))``, once as one batch and once input by input (the
images and the image check are every image graph's: ``converters/library/image_parity.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from embedgate.contract.errors import ParityError
from embedgate.contract.kinds.clip import AnyClipText
from embedgate.contract.spec import INPUT_IDS, ParityResult
from embedgate.converters.library.image_parity import (  # noqa: F401 - the CLIP kind's names for them
    check_images,
    decoded,
    gateway_pixels,
    min_cosine,
    parity_images,
)
from embedgate.converters.library.parity import Run, parity_sentences

_CLIP_SENTENCES = (
    "a photo of a cat",
    "A DIAGRAM of &amp; HTML &lt;entities&gt; and &#39;quotes&#39;",
    "“curly quotes”, ‘apostrophes’, the ﬁ ligature and ＦＵＬＬ width",
    "it's they're we've I'll she'd I'm",
    "text with the <end_of_text> marker inside",
    "",
)


def clip_sentences(context_length: int) -> list[str]:
    return [*parity_sentences(context_length), *_CLIP_SENTENCES]


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
    lowest = min_cosine(graph, INPUT_IDS, token_ids, reference, threshold, labels)
    return ParityResult(passed=True, threshold=threshold, min_cosine=lowest, sentences=len(token_ids))


def reference_pixels(images: Sequence[bytes], preprocess: Callable) -> list:
    """OpenCLIP's eval transform of each image as ``Image.open`` gives it."""
    return [preprocess(image) for image in decoded(images)]
