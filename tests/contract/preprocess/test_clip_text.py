"""The gateway's CLIP tokenizer against OpenCLIP's SimpleTokenizer: identical token ids."""

from __future__ import annotations

import random

import numpy as np
import pytest

from embedgate.contract.preprocess.clip_text import ClipTokenizer
from embedgate.converters.kinds.clip.parity import clip_sentences
from embedgate.converters.kinds.clip.tokenizer import clip_text_spec, save_clip_tokenizer


def simple_tokenizer(**options):
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer(**options)


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    return save_clip_tokenizer(simple_tokenizer(), tmp_path_factory.mktemp("clip-tokenizer"))


def both(tokenizer_file, **options):
    reference = simple_tokenizer(**options)
    return ClipTokenizer(tokenizer_file, clip_text_spec(reference, "test")), reference


def random_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcXYZ019 _-'!?.,<>&;#@éßøΩЖ中😀\u0301\u200b\u00a0\t\n"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(count)]


TEXTS = [
    *clip_sentences(77),
    "<start_of_text> in the middle",
    "[<end_of_text>] after punctuation",
    "<END_OF_TEXT> in capitals",
    "don't WON'T y'all's",
    "&amp;amp; twice-escaped",
    "   ",
    *random_texts(500),
]


@pytest.mark.parametrize("clean", ["lower", "whitespace", "canonicalize"])
def test_token_ids_equal_simple_tokenizer(tokenizer_file, clean):
    ours, reference = both(tokenizer_file, clean=clean)
    np.testing.assert_array_equal(ours.encode(TEXTS).input_ids, reference(TEXTS).numpy())


@pytest.mark.parametrize("context_length", [5, 24, 77])
def test_truncation_keeps_the_end_of_text_token(tokenizer_file, context_length):
    ours, reference = both(tokenizer_file, context_length=context_length)
    texts = ["short", "a much longer text that goes on " * 20]
    batch = ours.encode(texts)
    np.testing.assert_array_equal(batch.input_ids, reference(texts).numpy())
    assert batch.input_ids.shape == (2, context_length)
    assert batch.input_ids[1, -1] == reference.eot_token_id
    assert batch.truncated == 1
    assert batch.token_counts == [3, context_length]
    assert batch.attention_mask[0].sum() == 3


def test_empty_and_blank_texts_are_start_and_end_only(tokenizer_file):
    ours, reference = both(tokenizer_file)
    batch = ours.encode(["", " \t\n"])
    assert batch.input_ids[:, :3].tolist() == [[reference.sot_token_id, reference.eot_token_id, 0]] * 2
