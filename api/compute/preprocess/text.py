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


class TextTokenizer:
    def __init__(
        self,
        tokenizer_file: Path,
        max_length: int,
        strip_whitespace: bool = False,
    ):
        self.max_length = max_length
        self.strip_whitespace = strip_whitespace
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_length)

    def encode(self, texts: list[str], pad_to_bucket: bool = False) -> TokenBatch:
        prepared = [t.strip() for t in texts] if self.strip_whitespace else texts
        encodings = self._tokenizer.encode_batch(prepared)
        counts = [len(e.ids) for e in encodings]
        longest = max(counts)
        if pad_to_bucket:
            longest = bucket_length(longest, self.max_length)
        input_ids = np.zeros((len(encodings), longest), dtype=np.int64)
        attention_mask = np.zeros((len(encodings), longest), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            n = counts[row]
            input_ids[row, :n] = encoding.ids
            attention_mask[row, :n] = 1
        return TokenBatch(input_ids, attention_mask, counts, [bool(e.overflowing) for e in encodings])
