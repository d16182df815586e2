"""The gateway's tokenizer must give exactly the ids SentenceTransformer.encode uses."""

from pathlib import Path

import numpy as np
import pytest

from api.preprocess.text import TextTokenizer


TEXTS = [
    "A man is eating food.",
    "   leading and trailing whitespace   ",
    "UPPER case Text",
    "Ünïcödé, emoji 🚀 and 中文字符",
    "",
    "word " * 400,  # far past the max sequence length
]


def test_ids_and_mask_match_sentence_transformers(minilm, minilm_path):
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", minilm.max_seq_length)
    ours = tokenizer.encode(TEXTS)
    theirs = minilm.tokenize(TEXTS)
    np.testing.assert_array_equal(ours.input_ids, theirs["input_ids"].numpy())
    np.testing.assert_array_equal(ours.attention_mask, theirs["attention_mask"].numpy())
    assert ours.truncated == 1
    assert ours.token_counts[-1] == minilm.max_seq_length


def test_lower_casing_is_applied_when_the_model_asks(minilm_path):
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 16, do_lower_case=True)
    assert tokenizer.encode(["HELLO"]).input_ids.tolist() == tokenizer.encode(["hello"]).input_ids.tolist()
