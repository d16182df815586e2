"""Parity checks: the published files must reproduce the PyTorch model.

The serving path is replayed as the gateway runs it: the published ``tokenizer.json``
(through ``tokenizers``, not transformers), right padding with id 0 and mask 0, and the
exported ONNX under onnxruntime. Its outputs are compared with the model's own library
input by input, once as one padded batch and once per input alone (padding must not
change an output): embeddings by cosine (``SentenceTransformer.encode``), sparse vectors by
cosine and by which weights are non-zero (``SparseEncoder.encode``), cross-encoder scores by
their difference (``CrossEncoder.predict``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from embedgate.contract.errors import ParityError
from embedgate.contract.spec import ATTENTION_MASK, EMBEDDING, INPUT_IDS, TOKEN_TYPE_IDS, ParityResult

# A text, or a cross-encoder's (query, document) pair.
TextInput = str | tuple[str, str]

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


def parity_pairs(max_length: int) -> list[tuple[str, str]]:
    """(query, document) pairs of the parity sentences, and pairs past ``max_length`` tokens
    with the long text first, second and both (exercises the longest-first truncation)."""
    sentences = parity_sentences(max_length)
    *short, long_text = sentences
    pairs = [(short[i], short[(i + 3) % len(short)]) for i in range(len(short))]
    return [*pairs, (short[1], long_text), (long_text, short[1]), (long_text, " ".join(reversed(long_text.split())))]


def reference_token_ids(input_ids: np.ndarray, attention_mask: np.ndarray) -> list[list[int]]:
    """Per-sentence ids from a padded batch (works for left or right padding)."""
    return [row[mask.astype(bool)].tolist() for row, mask in zip(input_ids, attention_mask)]


def gateway_encodings(
    tokenizer_file: Path, inputs: Sequence[TextInput], *, strip: bool, add_special_tokens: bool = True
) -> list:
    """The ``tokenizers`` encodings the gateway makes of texts or pairs."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    if strip:
        inputs = [text.strip() if isinstance(text, str) else tuple(part.strip() for part in text) for text in inputs]
    return tokenizer.encode_batch(list(inputs), add_special_tokens=add_special_tokens)


def gateway_token_ids(
    tokenizer_file: Path, sentences: Sequence[TextInput], *, strip: bool, add_special_tokens: bool = True
) -> list[list[int]]:
    encodings = gateway_encodings(tokenizer_file, sentences, strip=strip, add_special_tokens=add_special_tokens)
    return [encoding.ids for encoding in encodings]


def check_tokenization(
    tokenizer_file: Path, sentences: Sequence[TextInput], expected: list[list[int]], *, add_special_tokens: bool = True
) -> tuple[bool, list[list[int]]]:
    """Find whether the gateway must strip whitespace to match the model's own tokenization.

    Returns ``(strip_whitespace, token ids)``. Plain tokenization is preferred; stripping is
    only chosen when the model's preprocessing strips and the tokenizer is whitespace-sensitive.
    """
    first_mismatch: int | None = None
    for strip in (False, True):
        ids = gateway_token_ids(tokenizer_file, sentences, strip=strip, add_special_tokens=add_special_tokens)
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


def pad(
    token_ids: Sequence[Sequence[int]], type_ids: Sequence[Sequence[int]] | None = None
) -> dict[str, np.ndarray]:
    """Right-pad with id 0 and mask 0 (and segment 0), as the Python-backend model does."""
    length = max(len(ids) for ids in token_ids)
    input_ids = np.zeros((len(token_ids), length), dtype=np.int64)
    attention_mask = np.zeros((len(token_ids), length), dtype=np.int64)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    feeds = {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask}
    if type_ids is not None:
        segments = np.zeros_like(input_ids)
        for row, types in enumerate(type_ids):
            segments[row, : len(types)] = types
        feeds[TOKEN_TYPE_IDS] = segments
    return feeds


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row's cosine; two rows of zeros are alike (a sparse query whose tokens all weigh 0)."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    norm_a, norm_b = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    values = (a * b).sum(axis=1) / np.maximum(norm_a * norm_b, 1e-12)
    return np.where((norm_a == 0) & (norm_b == 0), 1.0, values)


Run = Callable[[dict[str, np.ndarray]], np.ndarray]


def onnx_runner(onnx_file: Path, output: str = EMBEDDING) -> Run:
    """``output`` of one padded batch by ``onnx_file`` under onnxruntime, fed the inputs the
    graph declares (as the gateway feeds it: a tokenizer output it does not read is left
    out; one it needs and is not given fails the check, naming it)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    declared = [value.name for value in session.get_inputs()]

    def run(feeds: dict[str, np.ndarray]) -> np.ndarray:
        missing = [name for name in declared if name not in feeds]
        if missing:
            raise ParityError(f"the graph takes {', '.join(missing)}, which its tokenizer does not give")
        return session.run([output], {name: feeds[name] for name in declared})[0]

    return run


def embedding_checks(run: Run, token_ids: list[list[int]], reference: np.ndarray) -> dict[str, np.ndarray]:
    """Each sentence's cosine against ``reference``, embedded in one padded batch and alone."""
    batched = run(pad(token_ids))
    alone = np.concatenate([run(pad([ids])) for ids in token_ids])
    if batched.shape != reference.shape:
        raise ParityError(
            f"the graph's output shape {list(batched.shape)} differs from the model's {list(reference.shape)}"
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
    return check_run(onnx_runner(onnx_file), token_ids, reference, threshold)


def check_run(run: Run, token_ids: list[list[int]], reference: np.ndarray, threshold: float) -> ParityResult:
    """``run``'s embeddings against ``reference``, in one padded batch and alone; raises
    ParityError below ``threshold``."""
    result, worst = summarize(embedding_checks(run, token_ids, reference), threshold, len(token_ids))
    if not result.passed:
        raise ParityError(
            f"parity check failed: min cosine {result.min_cosine:.6f} < threshold {threshold} ({worst})"
        )
    return result


def batched_and_alone(run: Run, token_ids: list[list[int]], type_ids: list[list[int]] | None = None):
    """``run``'s outputs for the inputs as one padded batch, and each alone."""
    batched = run(pad(token_ids, type_ids))
    alone = np.concatenate(
        [run(pad([ids], None if type_ids is None else [type_ids[row]])) for row, ids in enumerate(token_ids)]
    )
    return batched, alone


def check_scores(
    run: Run, token_ids: list[list[int]], type_ids: list[list[int]] | None, reference: np.ndarray, tolerance: float
) -> ParityResult:
    """A cross-encoder's scores (``run``) against ``CrossEncoder.predict``: every score within
    ``tolerance``, in one padded batch and alone."""
    batched, alone = batched_and_alone(run, token_ids, type_ids)
    reference = reference.reshape(len(token_ids), -1)
    errors = {
        "as one padded batch": np.abs(batched.reshape(reference.shape) - reference).max(axis=1),
        "one pair at a time": np.abs(alone.reshape(reference.shape) - reference).max(axis=1),
    }
    worst_check, values = max(errors.items(), key=lambda item: item[1].max())
    error = float(values.max())
    if error > tolerance:
        raise ParityError(
            f"parity check failed: a score differs from CrossEncoder.predict by {error:.6g} > {tolerance:g} "
            f"(pair {int(values.argmax()) + 1} of {len(token_ids)}, {worst_check})"
        )
    return ParityResult(passed=True, threshold=tolerance, min_cosine=1.0, sentences=len(token_ids), max_abs_error=error)


# A weight this small against its row's largest may be zero on one side and not the other
# (a logit within float noise of 0 before the ReLU); anything larger must agree.
SPARSE_NOISE = 1e-5


def check_sparse(run: Run, token_ids: list[list[int]], reference: np.ndarray, threshold: float) -> ParityResult:
    """Sparse vectors (``run``, dense over the vocabulary) against ``SparseEncoder.encode``:
    cosine at least ``threshold`` and the same non-zero weights, in one batch and alone."""
    batched, alone = batched_and_alone(run, token_ids)
    cosine, error = np.inf, 0.0
    for name, vectors in (("as one padded batch", batched), ("one sentence at a time", alone)):
        if vectors.shape != reference.shape:
            raise ParityError(f"ONNX output shape {list(vectors.shape)} differs from the model's {list(reference.shape)}")
        scale = np.maximum(np.abs(reference).max(axis=1, keepdims=True), 1e-12)
        disagree = ((vectors != 0) != (reference != 0)) & (np.maximum(np.abs(vectors), np.abs(reference)) > SPARSE_NOISE * scale)
        if disagree.any():
            row = int(disagree.any(axis=1).argmax())
            raise ParityError(
                f"parity check failed: {int(disagree[row].sum())} vocabulary weights are zero on one side only "
                f"(sentence {row + 1} of {len(token_ids)}, {name})"
            )
        values = cosines(vectors, reference)
        if values.min() < threshold:
            raise ParityError(
                f"parity check failed: min cosine {values.min():.6f} < threshold {threshold} "
                f"(sentence {int(values.argmin()) + 1} of {len(token_ids)}, {name})"
            )
        cosine, error = min(cosine, float(values.min())), max(error, float(np.abs(vectors - reference).max()))
    return ParityResult(passed=True, threshold=threshold, min_cosine=cosine, sentences=len(token_ids), max_abs_error=error)
