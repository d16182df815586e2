"""The gateway's tokenizer for CLIP models with a Hugging Face tokenizer (SigLIP, SigLIP2)
against OpenCLIP's HFTokenizer: identical token ids, on tokenizers trained at test time."""

from __future__ import annotations

import numpy as np
import pytest

from embedgate.contract.errors import ConversionError
from embedgate.contract.kinds.clip import HFClipText
from embedgate.contract.preprocess.clip_hf_text import HFClipTokenizer
from embedgate.contract.preprocess.clip_text import clip_tokenizer
from embedgate.converters.kinds.clip.parity import clip_sentences
from embedgate.converters.kinds.clip.tokenizer import clip_text_spec, save_clip_tokenizer
from tests.clip_model import TOKENIZER_BUILDERS

from .test_clip_text import random_texts

CONTEXT_LENGTH = 16
KINDS = sorted(TOKENIZER_BUILDERS)
# The separator each test tokenizer appends, for strip_sep_token (neither declares one).
SEPARATORS = {"t5": "</s>", "gemma": "<eos>"}


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf-tokenizers")
    return {kind: build(root / kind) for kind, build in TOKENIZER_BUILDERS.items()}


def hf_tokenizer(directory, **options):
    from open_clip.tokenizer import HFTokenizer

    return HFTokenizer(str(directory), **{"context_length": CONTEXT_LENGTH, **options})


def both(directory, saved, **options):
    """The gateway's tokenizer, built from what the converter saves, and OpenCLIP's."""
    reference = hf_tokenizer(directory, **options)
    return clip_tokenizer(save_clip_tokenizer(reference, saved), clip_text_spec(reference, "test")), reference


TEXTS = [
    *clip_sentences(CONTEXT_LENGTH),
    "",
    "   ",
    " \t\n ",
    "&amp;amp; twice-escaped &lt;b&gt;bold&lt;/b&gt; &#39;quoted&#39;",
    "Ünïcödé: naïve façade, déjà vu, 中文, emoji 😀, ＦＵＬＬ width",
    "A PHOTO OF A CAT IN UPPER CASE",
    "snake_case_words and under_scores",
    "a photo of a dog playing in the snow " * 40,
    "special tokens written out: </s> <eos> <pad> <bos> <unk> <mask>",
    *random_texts(300, seed=1),
]


@pytest.mark.parametrize("clean", ["canonicalize", "whitespace", "lower"])
@pytest.mark.parametrize("kind", KINDS)
def test_token_ids_equal_hf_tokenizer(tokenizer_dirs, tmp_path, kind, clean):
    ours, reference = both(tokenizer_dirs[kind], tmp_path, clean=clean)
    assert isinstance(ours, HFClipTokenizer)
    batch = ours.encode(TEXTS)
    assert batch.input_ids.shape == (len(TEXTS), CONTEXT_LENGTH) and batch.input_ids.dtype == np.int64
    np.testing.assert_array_equal(batch.input_ids, reference(TEXTS).numpy())


@pytest.mark.parametrize("kind", KINDS)
def test_counts_and_truncation_are_transformers(tokenizer_dirs, tmp_path, kind):
    ours, reference = both(tokenizer_dirs[kind], tmp_path, clean="canonicalize")
    texts = ["a cat", "", "a photo of a dog playing in the snow " * 10]
    batch = ours.encode(texts)
    own = reference.tokenizer(
        [reference.clean_fn(text) for text in texts],
        max_length=CONTEXT_LENGTH,
        padding="max_length",
        truncation=True,
        return_overflowing_tokens=True,
    )
    np.testing.assert_array_equal(batch.attention_mask, own["attention_mask"][: len(texts)])
    assert batch.token_counts == [sum(mask) for mask in own["attention_mask"][: len(texts)]]
    assert batch.truncated_rows == [False, False, True] and batch.truncated == 1
    assert batch.token_counts[2] == CONTEXT_LENGTH


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("kind", KINDS)
def test_padding_and_truncation_sides(tokenizer_dirs, tmp_path, kind, side):
    ours, reference = both(tokenizer_dirs[kind], tmp_path, padding_side=side, truncation_side=side)
    expected = reference(TEXTS).numpy()
    np.testing.assert_array_equal(ours.encode(TEXTS).input_ids, expected)
    # The sides matter: a short text's padding is at the start or at the end.
    short = expected[TEXTS.index("a photo of a cat")]
    assert short[0 if side == "left" else -1] == reference.tokenizer.pad_token_id


@pytest.mark.parametrize("kind", KINDS)
def test_special_tokens_written_in_a_text_split_where_the_tokenizer_says(tokenizer_dirs, tmp_path, kind):
    ours, reference = both(tokenizer_dirs[kind], tmp_path, clean="whitespace", split_special_tokens=True)
    texts = [f"{SEPARATORS[kind]} <unk> in a text", "plain"]
    expected = reference(texts).numpy()
    np.testing.assert_array_equal(ours.encode(texts).input_ids, expected)
    assert not np.array_equal(expected, hf_tokenizer(tokenizer_dirs[kind], clean="whitespace")(texts).numpy())


@pytest.mark.parametrize("strip", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_strip_sep_token(tokenizer_dirs, tmp_path, kind, strip):
    ours, reference = both(tokenizer_dirs[kind], tmp_path, strip_sep_token=strip, sep_token=SEPARATORS[kind])
    expected = reference(TEXTS).numpy()
    np.testing.assert_array_equal(ours.encode(TEXTS).input_ids, expected)
    # The option changes the ids (every row holds the separator unless it is stripped).
    assert (expected == reference.tokenizer.sep_token_id).any(axis=1).all() != strip


def test_clips_mode(tokenizer_dirs, tmp_path):
    ours, reference = both(tokenizer_dirs["gemma"], tmp_path, tokenizer_mode="clips", cls_token="<mask>")
    expected = reference(TEXTS).numpy()
    batch = ours.encode(TEXTS)
    np.testing.assert_array_equal(batch.input_ids, expected)
    assert (expected[:, -1] == reference.tokenizer.cls_token_id).all()
    long_row = TEXTS.index("a photo of a dog playing in the snow " * 40)
    assert batch.truncated_rows[long_row] and batch.token_counts[long_row] == CONTEXT_LENGTH
    assert batch.token_counts[TEXTS.index("")] == 3  # begin, end, class


def test_metadata_records_the_hf_tokenizer(tokenizer_dirs):
    reference = hf_tokenizer(tokenizer_dirs["t5"], clean="canonicalize", strip_sep_token=True, sep_token="</s>")
    spec = clip_text_spec(reference, "test")
    assert spec == HFClipText(
        context_length=CONTEXT_LENGTH,
        clean="canonicalize",
        pad_token_id=reference.tokenizer.pad_token_id,
        strip_sep_token_id=reference.tokenizer.sep_token_id,
    )
    assert spec.tokenizer == "hf" and spec.clips is None


@pytest.mark.parametrize(
    "kind, options, message",
    [
        ("t5", {"tokenizer_mode": "clips"}, "needs the tokenizer's bos, cls token"),
        ("gemma", {"strip_sep_token": True}, "has no sep token"),
        ("t5", {"tokenizer_mode": "bert_clips"}, "tokenizer_mode 'bert_clips'"),
    ],
    ids=["clips-without-its-tokens", "strip-sep-without-a-separator", "unknown-mode"],
)
def test_what_open_clip_cannot_tokenize_is_refused(tokenizer_dirs, kind, options, message):
    with pytest.raises(ConversionError, match=message):
        clip_text_spec(hf_tokenizer(tokenizer_dirs[kind], **options), "test")


def test_a_tokenizer_without_a_pad_token_is_refused(tokenizer_dirs):
    reference = hf_tokenizer(tokenizer_dirs["gemma"])
    reference.tokenizer.pad_token = None
    with pytest.raises(ConversionError, match="no pad token"):
        clip_text_spec(reference, "test")
    with pytest.raises(ValueError, match="padding token"):  # as OpenCLIP itself fails
        reference(["a cat"])
