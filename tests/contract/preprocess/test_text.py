"""The gateway's tokenizer must give exactly the ids SentenceTransformer.encode uses."""

from pathlib import Path

import numpy as np
import pytest

from embedgate.contract.preprocess.text import PairTokenizer, TextTokenizer, bucket_length

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


@pytest.mark.parametrize("strip, expected", [(True, ["x"]), (False, [" x "])])
def test_stripping_follows_the_models_metadata(minilm_path, strip, expected):
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 16, strip_whitespace=strip)
    real = tokenizer._tokenizer
    seen = []

    class Spy:
        def encode_batch_fast(self, texts, add_special_tokens=True):
            seen.extend(texts)
            return real.encode_batch_fast(texts, add_special_tokens=add_special_tokens)

    tokenizer._tokenizer = Spy()
    tokenizer.encode([" x "])
    assert seen == expected


@pytest.mark.parametrize(
    "length, max_length, bucket",
    [(1, 256, 8), (8, 256, 8), (9, 256, 16), (100, 256, 128), (200, 256, 256), (256, 256, 256), (77, 77, 77)],
)
def test_bucket_lengths(length, max_length, bucket):
    assert bucket_length(length, max_length) == bucket


def test_bucketed_batches_pad_to_the_bucket_and_keep_the_mask(minilm_path):
    tokenizer = TextTokenizer(Path(minilm_path) / "tokenizer.json", 256)
    plain = tokenizer.encode(["a short one", "one two three four five six seven eight nine"])
    bucketed = tokenizer.encode(["a short one", "one two three four five six seven eight nine"], pad_to_bucket=True)
    assert plain.input_ids.shape[1] == 11 and bucketed.input_ids.shape == (2, 16)
    np.testing.assert_array_equal(bucketed.input_ids[:, :11], plain.input_ids)
    assert bucketed.input_ids[:, 11:].sum() == 0 and bucketed.attention_mask[:, 11:].sum() == 0
    np.testing.assert_array_equal(bucketed.attention_mask.sum(1), plain.attention_mask.sum(1))


PAIRS = [
    ("what is a fox", "The quick brown fox jumps over the lazy dog."),
    ("word " * 300, "a short document"),  # the query is the long one: it loses tokens first
    ("a short query", "word " * 300),
    ("word " * 200, "other " * 200),  # both long: cut in turns, longest first
    ("", ""),
]


@pytest.mark.parametrize("max_length", [32, 128])
def test_pairs_match_the_libraries_pair_tokenization(minilm, minilm_path, max_length):
    # A CrossEncoder tokenizes [query, document] with its (fast) tokenizer, longest first.
    hf = minilm.tokenizer([list(pair) for pair in PAIRS], padding=True, truncation="longest_first",
                          max_length=max_length, return_tensors="np")
    ours = PairTokenizer(Path(minilm_path) / "tokenizer.json", max_length, type_ids=True).encode(PAIRS)
    np.testing.assert_array_equal(ours.input_ids, hf["input_ids"])
    np.testing.assert_array_equal(ours.attention_mask, hf["attention_mask"])
    np.testing.assert_array_equal(ours.token_type_ids, hf["token_type_ids"])
    assert ours.truncated_rows == [False, True, True, True, False]
    # Without type ids (models that take none), the rest is the same.
    plain = PairTokenizer(Path(minilm_path) / "tokenizer.json", max_length).encode(PAIRS)
    assert plain.token_type_ids is None and np.array_equal(plain.input_ids, ours.input_ids)
