"""Text tokenization with the tokenizer saved beside each model.

Uses the Rust ``tokenizers`` library directly (no transformers, no torch on the serving
path) and replays what ``SentenceTransformer.encode`` does, as the converter recorded it
in the model's metadata: strip each text where the model's own preprocessing does, and
truncate to the model's max sequence length. Lower-casing, where a model wants it, is part
of the saved ``tokenizer.json`` (the converter checks), so it is not repeated here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


@dataclass(frozen=True)
class TokenBatch:
    input_ids: np.ndarray  # int64 [n, longest]
    attention_mask: np.ndarray  # int64 [n, longest]
    token_counts: list[int]
    truncated_rows: list[bool]  # each text: was it cut to max_length?
    # Pairs: 0 for the first text's tokens, 1 for the second's (int64 [n, longest]).
    token_type_ids: np.ndarray | None = None
    # Multi-vector models: the positions whose vectors a text keeps (bool [n, longest]).
    scored: np.ndarray | None = None

    @property
    def truncated(self) -> int:
        """How many texts were cut to max_length."""
        return sum(self.truncated_rows)


def bucket_length(length: int, max_length: int, smallest: int = 8) -> int:
    """The padded length for a batch whose longest text has ``length`` tokens.

    Triton's native ONNX Runtime backend batches only requests of identical shape, so
    for that form the gateway pads to a few fixed lengths (powers of two, capped at the
    model's max length) and requests of one bucket batch together.
    """
    bucket = smallest
    while bucket < length:
        bucket *= 2
    return min(bucket, max(max_length, length))


def _batch(encodings: list, pad_to_bucket: bool, max_length: int, type_ids: bool = False) -> TokenBatch:
    """Encodings right-padded with id 0 and mask 0 (and segment 0) to the longest, or to
    its bucket (the native form)."""
    return padded(
        [e.ids for e in encodings], [bool(e.overflowing) for e in encodings], pad_to_bucket, max_length,
        [e.type_ids for e in encodings] if type_ids else None,
    )


def padded(
    rows: list, truncated: list[bool], pad_to_bucket: bool, max_length: int, type_ids: list | None = None
) -> TokenBatch:
    """Token ids (one sequence per row) right-padded with id 0 and mask 0 (and segment 0) to
    the longest, or to its bucket (the native form)."""
    counts = [len(ids) for ids in rows]
    longest = max(counts)
    if pad_to_bucket:
        longest = bucket_length(longest, max_length)
    input_ids = np.zeros((len(rows), longest), dtype=np.int64)
    attention_mask = np.zeros((len(rows), longest), dtype=np.int64)
    segments = np.zeros((len(rows), longest), dtype=np.int64) if type_ids is not None else None
    for row, ids in enumerate(rows):
        n = counts[row]
        input_ids[row, :n] = ids
        attention_mask[row, :n] = 1
        if segments is not None:
            segments[row, :n] = type_ids[row]  # type: ignore[index]
    return TokenBatch(input_ids, attention_mask, counts, truncated, segments)


class TextTokenizer:
    def __init__(
        self,
        tokenizer_file: Path,
        max_length: int,
        strip_whitespace: bool = False,
        add_special_tokens: bool = True,
    ):
        self.max_length = max_length
        self.strip_whitespace = strip_whitespace
        # False for a route that tokenizes without the model's special tokens (static weights).
        self.add_special_tokens = add_special_tokens
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_length)
        self._whole: Tokenizer | None = None

    def encodings(self, texts: list[str]) -> list:
        """Each text's encoding: its ids, type ids, special tokens and whether it was cut, not
        its offsets (``encode_batch_fast``: the same ids for about a fifth less CPU; what
        needs offsets tokenizes with :meth:`whole`)."""
        prepared = [t.strip() for t in texts] if self.strip_whitespace else texts
        return self._tokenizer.encode_batch_fast(prepared, add_special_tokens=self.add_special_tokens)

    def encode(self, texts: list[str], pad_to_bucket: bool = False) -> TokenBatch:
        return _batch(self.encodings(texts), pad_to_bucket, self.max_length)

    def as_read(self, text: str, prompt: str, add_special_tokens: bool) -> tuple[str, bool]:
        """``text`` after ``prompt`` as the model reads it, whole (TEI's ``/tokenize``), and
        whether the tokenizer adds its special tokens to it."""
        return prompt + text, add_special_tokens

    def whole(self) -> Tokenizer:
        """The same tokenizer without truncation, for what tokenizing a text gives in full
        (and decoding ids); built on first use. Two threads may each build one: they are alike."""
        whole = self._whole
        if whole is None:
            whole = Tokenizer.from_str(self._tokenizer.to_str())
            whole.no_truncation()
            self._whole = whole
        return whole


class PairTokenizer(TextTokenizer):
    """(query, document) pairs tokenized together, as a CrossEncoder does: one sequence
    (``[CLS] query [SEP] document [SEP]`` for BERT), cut longest-first to ``max_length``
    (the truncation strategy the library uses), with token type ids where the model takes them.
    A single text (a classifier's input) is tokenized alone, as ``CrossEncoder.predict(text)``."""

    def __init__(self, tokenizer_file: Path, max_length: int, strip_whitespace: bool = False, type_ids: bool = False):
        super().__init__(tokenizer_file, max_length, strip_whitespace)
        self.type_ids = type_ids

    def encode(self, pairs: list[tuple[str, str] | str], pad_to_bucket: bool = False) -> TokenBatch:
        if self.strip_whitespace:
            pairs = [pair.strip() if isinstance(pair, str) else (pair[0].strip(), pair[1].strip()) for pair in pairs]
        encodings = self._tokenizer.encode_batch_fast(pairs)
        return _batch(encodings, pad_to_bucket, self.max_length, self.type_ids)
