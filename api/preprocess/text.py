"""Text tokenization with the tokenizer saved beside each model.

Uses the Rust ``tokenizers`` library directly (no transformers, no torch on the serving
path) and replays what ``SentenceTransformer.encode`` does: strip each text, lower-case
when the model says so, truncate to the model's max sequence length.
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
    truncated: int  # how many texts were cut to max_length


class TextTokenizer:
    def __init__(self, tokenizer_file: Path, max_length: int, do_lower_case: bool = False):
        self.max_length = max_length
        self.do_lower_case = do_lower_case
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_length)

    def encode(self, texts: list[str]) -> TokenBatch:
        prepared = [t.strip() for t in texts]
        if self.do_lower_case:
            prepared = [t.lower() for t in prepared]
        encodings = self._tokenizer.encode_batch(prepared)
        counts = [len(e.ids) for e in encodings]
        longest = max(counts)
        input_ids = np.zeros((len(encodings), longest), dtype=np.int64)
        attention_mask = np.zeros((len(encodings), longest), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            n = counts[row]
            input_ids[row, :n] = encoding.ids
            attention_mask[row, :n] = 1
        truncated = sum(1 for e in encodings if e.overflowing)
        return TokenBatch(input_ids, attention_mask, counts, truncated)
