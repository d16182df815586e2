"""Parity checks: the published files must reproduce the PyTorch model.

The serving path is replayed as the gateway runs it: the published ``tokenizer.json``
(through ``tokenizers``, not transformers), right padding with id 0 and mask 0, and the
exported ONNX under onnxruntime. Its embeddings are compared with
``SentenceTransformer.encode`` sentence by sentence, once as one padded batch and once
per sentence alone (padding must not change an embedding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from embedgate.converters.errors import ParityError
from embedgate.converters.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, ParityResult

_FIXED_SENTENCES = (
    "Hello world.",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "   Leading and trailing whitespace, tabs and a newline.\t\n",
    "Ünïcödé façade, naïve café: 日本語のテキスト, Привет мир, emoji 😀🚀",
    "What?! No... (really) -- yes; 'single' \"double\" #hash @at $5.00 100% a/b\\c {x: [1, 2]}",
    "MiXeD CaSe ShOuTiNg AND lower case",
    "3.14159 2718 1e-10 0x1F 2024-01-31T12:00:00Z",
    "def square(x):\n    return x ** 2  # code, indentation and a comment",
    "First line.\nSecond line.\n\nThird line after a blank one.",
    "How do I convert a PyTorch model to ONNX and serve it with Triton Inference Server?",
)


def parity_sentences(max_seq_length: int) -> list[str]:
    """The fixed sentences plus one longer than ``max_seq_length`` tokens (exercises truncation)."""
    # Every word is at least one token, so this is always past the limit.
    words = "embedding servers batch requests of different lengths".split()
    long_text = " ".join(words[i % len(words)] for i in range(max_seq_length + 16))
    return [*_FIXED_SENTENCES, long_text]


def reference_token_ids(input_ids: np.ndarray, attention_mask: np.ndarray) -> list[list[int]]:
    """Per-sentence ids from a padded batch (works for left or right padding)."""
    return [row[mask.astype(bool)].tolist() for row, mask in zip(input_ids, attention_mask)]


def gateway_token_ids(tokenizer_file: Path, sentences: Sequence[str], *, strip: bool) -> list[list[int]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    texts = [sentence.strip() for sentence in sentences] if strip else list(sentences)
    return [encoding.ids for encoding in tokenizer.encode_batch(texts, add_special_tokens=True)]


def check_tokenization(
    tokenizer_file: Path, sentences: Sequence[str], expected: list[list[int]]
) -> tuple[bool, list[list[int]]]:
    """Find whether the gateway must strip whitespace to match the model's own tokenization.

    Returns ``(strip_whitespace, token ids)``. Plain tokenization is preferred; stripping is
    only chosen when the model's preprocessing strips and the tokenizer is whitespace-sensitive.
    """
    first_mismatch: int | None = None
    for strip in (False, True):
        ids = gateway_token_ids(tokenizer_file, sentences, strip=strip)
        mismatches = [i for i, (got, want) in enumerate(zip(ids, expected)) if got != want]
        if not mismatches:
            return strip, ids
        if first_mismatch is None:
            first_mismatch = mismatches[0]
    assert first_mismatch is not None
    raise ParityError(
        f"the published tokenizer.json does not reproduce the model's tokenization "
        f"(sentence {first_mismatch + 1} of {len(sentences)}: {sentences[first_mismatch][:40]!r})"
    )


def pad(token_ids: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """Right-pad with id 0 and mask 0, as the Python-backend model does."""
    length = max(len(ids) for ids in token_ids)
    input_ids = np.zeros((len(token_ids), length), dtype=np.int64)
    attention_mask = np.zeros((len(token_ids), length), dtype=np.int64)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    return {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(norms, 1e-12)


Run = Callable[[dict[str, np.ndarray]], np.ndarray]


def onnx_runner(onnx_file: Path) -> Run:
    """Embeddings of one padded batch by ``onnx_file`` under onnxruntime."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    return lambda feeds: session.run([EMBEDDING], feeds)[0]


def embedding_checks(run: Run, token_ids: list[list[int]], reference: np.ndarray) -> dict[str, np.ndarray]:
    """Each sentence's cosine against ``reference``, embedded in one padded batch and alone."""
    batched = run(pad(token_ids))
    alone = np.concatenate([run(pad([ids])) for ids in token_ids])
    if batched.shape != reference.shape:
        raise ParityError(
            f"ONNX output shape {list(batched.shape)} differs from the model's {list(reference.shape)}"
        )
    return {
        "as one padded batch": cosines(batched, reference),
        "one sentence at a time": cosines(alone, reference),
    }


def summarize(checks: dict[str, np.ndarray], threshold: float, sentences: int) -> tuple[ParityResult, str]:
    """Judge ``checks`` (each check's cosines against the reference): the result, and where
    it was worst."""
    values = np.concatenate(list(checks.values()))
    min_cosine = float(values.min())
    result = ParityResult(
        passed=min_cosine >= threshold,
        threshold=threshold,
        min_cosine=min_cosine,
        sentences=sentences,
        mean_cosine=float(values.mean()),
    )
    worst_check, worst = min(checks.items(), key=lambda item: item[1].min())
    return result, f"sentence {int(worst.argmin()) + 1} of {len(worst)}, {worst_check}"


def measure_embeddings(
    onnx_file: Path, token_ids: list[list[int]], reference: np.ndarray, threshold: float
) -> tuple[ParityResult, str]:
    """The parity of ``onnx_file`` without judging it: the result, and where it was worst."""
    checks = embedding_checks(onnx_runner(onnx_file), token_ids, reference)
    return summarize(checks, threshold, len(token_ids))


def check_embeddings(
    onnx_file: Path, token_ids: list[list[int]], reference: np.ndarray, threshold: float
) -> ParityResult:
    result, worst = measure_embeddings(onnx_file, token_ids, reference, threshold)
    if not result.passed:
        raise ParityError(
            f"parity check failed: min cosine {result.min_cosine:.6f} < threshold {threshold} ({worst})"
        )
    return result
