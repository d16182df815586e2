"""Tokenization for a CLIP text tower, as OpenCLIP's ``SimpleTokenizer`` does it, without torch.

SimpleTokenizer cleans a text (ftfy, HTML entities, whitespace, and lower-casing or
canonicalizing), splits it into words with one regular expression, and byte-pair encodes
each word. Here the cleaning and the split are the same Python calls, and the byte-pair
encoding runs in the Rust ``tokenizers`` library from the vocabulary the converter saved
(``tokenizer.json``). Every row is ``[start] + tokens + [end]`` padded with 0 to the
context length; a longer text is cut and its last token set back to the end-of-text token,
as OpenCLIP does (the text tower pools at that token). The converter checks, before it
publishes, that this module reproduces OpenCLIP's token ids.

Models whose OpenCLIP tokenizer is a Hugging Face one are tokenized by ``clip_hf_text``;
``clip_tokenizer`` chooses by the model's metadata.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import regex
from tokenizers import Tokenizer

from embedgate.contract.kinds.clip import AnyClipText, ClipText, HFClipText
from embedgate.contract.preprocess.clip_clean import CLEANERS
from embedgate.contract.preprocess.clip_hf_text import HFClipTokenizer
from embedgate.contract.preprocess.text import TokenBatch


class ClipTokenizer:
    def __init__(self, tokenizer_file: Path, text: ClipText):
        self.max_length = text.context_length
        self._text = text
        self._clean = CLEANERS[text.clean]
        self._words = regex.compile(text.word_pattern, regex.IGNORECASE)
        self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids between the start and end tokens, before truncation."""
        words = [self._words.findall(self._clean(text)) for text in texts]
        # Texts with no words at all (empty, or only spaces) encode to no tokens.
        ids: list[list[int]] = [[] for _ in texts]
        rows = [row for row, found in enumerate(words) if found]
        if rows:
            encodings = self._tokenizer.encode_batch(
                [words[row] for row in rows], is_pretokenized=True, add_special_tokens=False
            )
            for row, encoding in zip(rows, encodings):
                ids[row] = encoding.ids
        return ids

    def encode(self, texts: list[str], pad_to_bucket: bool = False) -> TokenBatch:
        """Rows of exactly ``context_length`` tokens: the text tower takes no other length,
        so ``pad_to_bucket`` changes nothing here."""
        length, sot, eot = self.max_length, self._text.sot_token_id, self._text.eot_token_id
        input_ids = np.zeros((len(texts), length), dtype=np.int64)
        attention_mask = np.zeros((len(texts), length), dtype=np.int64)
        counts, truncated = [], []
        for row, ids in enumerate(self.token_ids(texts)):
            tokens = [sot, *ids, eot]
            truncated.append(len(tokens) > length)
            if truncated[-1]:
                tokens = tokens[:length]
                tokens[-1] = eot
            input_ids[row, : len(tokens)] = tokens
            attention_mask[row, : len(tokens)] = 1
            counts.append(len(tokens))
        return TokenBatch(input_ids, attention_mask, counts, truncated)


# The gateway's tokenizer of a CLIP text tower, one kind per OpenCLIP tokenizer class.
AnyClipTokenizer = ClipTokenizer | HFClipTokenizer


def clip_tokenizer(tokenizer_file: Path, text: AnyClipText) -> AnyClipTokenizer:
    """The tokenizer that replays the one OpenCLIP gives the model, as its metadata records it."""
    if isinstance(text, HFClipText):
        return HFClipTokenizer(tokenizer_file, text)
    return ClipTokenizer(tokenizer_file, text)
