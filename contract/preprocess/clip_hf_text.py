"""Tokenization for a CLIP text tower whose OpenCLIP tokenizer is ``HFTokenizer`` (SigLIP,
SigLIP2 and others), without torch or transformers.

HFTokenizer cleans each text with OpenCLIP's cleaning, then calls the Hugging Face tokenizer
with ``max_length=context_length, padding="max_length", truncation=True``; transformers
turns that into settings of the Rust tokenizer (truncation and padding, on the sides the
tokenizer was configured with) and one ``encode_batch`` with the special tokens. Here the
same Rust tokenizer, saved by the converter as ``tokenizer.json``, gets the same settings
from the model's metadata. ``strip_sep_token`` then sets the separator's id to 0, and the
``clips`` mode lays out its rows by hand, both as OpenCLIP does. The converter checks,
before it publishes, that this module reproduces OpenCLIP's token ids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Encoding, Tokenizer

from embedgate.contract.kinds.clip import ClipsLayout, HFClipText
from embedgate.contract.preprocess.clip_clean import CLEANERS
from embedgate.contract.preprocess.text import TokenBatch


class HFClipTokenizer:
    def __init__(self, tokenizer_file: Path, text: HFClipText):
        self.max_length = text.context_length
        self._text = text
        self._clean = CLEANERS[text.clean]
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.encode_special_tokens = text.split_special_tokens
        if text.clips is None:
            self._tokenizer.enable_truncation(
                max_length=text.context_length, stride=0, strategy="longest_first", direction=text.truncation_side
            )
            self._tokenizer.enable_padding(
                length=text.context_length, pad_id=text.pad_token_id, direction=text.padding_side
            )
        else:
            # The clips mode tokenizes without special tokens, truncation or padding.
            self._tokenizer.no_truncation()
            self._tokenizer.no_padding()

    def encode(self, texts: list[str], pad_to_bucket: bool = False) -> TokenBatch:
        """Rows of exactly ``context_length`` tokens: the text tower takes no other length,
        so ``pad_to_bucket`` changes nothing here."""
        cleaned = [self._clean(text) for text in texts]
        if self._text.clips is not None:
            return self._clips_rows(self._tokenizer.encode_batch(cleaned, add_special_tokens=False), self._text.clips)
        encodings = self._tokenizer.encode_batch(cleaned, add_special_tokens=True)
        shape = (len(texts), self.max_length)  # truncated and padded to exactly that
        input_ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64).reshape(shape)
        attention_mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64).reshape(shape)
        if self._text.strip_sep_token_id is not None:
            input_ids[input_ids == self._text.strip_sep_token_id] = 0
        counts = [int(count) for count in attention_mask.sum(axis=1)]
        return TokenBatch(input_ids, attention_mask, counts, [bool(encoding.overflowing) for encoding in encodings])

    def _clips_rows(self, encodings: list[Encoding], clips: ClipsLayout) -> TokenBatch:
        length, pad = self.max_length, self._text.pad_token_id
        input_ids = np.zeros((len(encodings), length), dtype=np.int64)
        attention_mask = np.zeros((len(encodings), length), dtype=np.int64)
        counts, truncated = [], []
        for row, encoding in enumerate(encodings):
            # The same slices as HFTokenizer._clips_tokenize and _pad_and_add_class_token.
            tokens = [clips.bos_token_id, *encoding.ids[: length - 3], clips.eos_token_id][: length - 1]
            truncated.append(len(encoding.ids) > length - 3)
            padded = [*tokens, *[pad] * (length - 1 - len(tokens)), clips.cls_token_id]
            input_ids[row, : len(padded)] = padded
            attention_mask[row, : len(tokens)] = 1
            attention_mask[row, len(padded) - 1] = 1
            counts.append(len(tokens) + 1)
        return TokenBatch(input_ids, attention_mask, counts, truncated)
