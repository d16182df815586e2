from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from embedgate.contract.errors import ParityError
from embedgate.converters.library import parity


@pytest.fixture
def whitespace_sensitive_tokenizer(tmp_path):
    """A Metaspace tokenizer: a trailing space becomes its own token, unlike with BERT."""
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "▁hello": 1, "▁": 2, "▁world": 3}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_sentences_cover_truncation_and_whitespace():
    sentences = parity.parity_sentences(max_seq_length=32)

    assert len(sentences) >= 10
    assert len(sentences[-1].split()) > 32
    assert any(s != s.strip() for s in sentences)
    assert any(not s.isascii() for s in sentences)


def test_plain_tokenization_is_preferred(whitespace_sensitive_tokenizer):
    sentences = ["hello world ", "world"]
    expected = parity.gateway_token_ids(whitespace_sensitive_tokenizer, sentences, strip=False)

    assert parity.check_tokenization(whitespace_sensitive_tokenizer, sentences, expected) == (False, expected)


def test_stripping_is_detected_when_the_model_strips(whitespace_sensitive_tokenizer):
    sentences = ["hello world ", "world"]
    expected = parity.gateway_token_ids(whitespace_sensitive_tokenizer, sentences, strip=True)

    strip, ids = parity.check_tokenization(whitespace_sensitive_tokenizer, sentences, expected)

    assert strip is True and ids == [[1, 3], [3]]


def test_a_tokenizer_that_cannot_reproduce_the_model_is_refused(whitespace_sensitive_tokenizer):
    with pytest.raises(ParityError, match="sentence 2 of 2"):
        parity.check_tokenization(whitespace_sensitive_tokenizer, ["hello", "world"], [[1], [1]])


def test_pad_right_pads_with_zero_ids_and_mask():
    padded = parity.pad([[5, 6, 7], [8]])

    np.testing.assert_array_equal(padded["input_ids"], [[5, 6, 7], [8, 0, 0]])
    np.testing.assert_array_equal(padded["attention_mask"], [[1, 1, 1], [1, 0, 0]])


def test_embeddings_pass_against_their_own_reference(mean_pool_onnx):
    token_ids = [[1, 2, 3], [4], [5, 6]]
    reference = np.stack([mean_pool_onnx.table[ids].mean(axis=0) for ids in token_ids])

    result = parity.check_embeddings(mean_pool_onnx.path, token_ids, reference, threshold=0.9999)

    assert result.passed and result.min_cosine > 0.9999 and result.sentences == 3


def test_embeddings_below_threshold_name_the_min_cosine(mean_pool_onnx):
    token_ids = [[1, 2, 3], [4]]
    reference = np.stack([mean_pool_onnx.table[ids].mean(axis=0) for ids in token_ids])
    reference[1] = -reference[1]

    with pytest.raises(ParityError, match=r"min cosine -1\.0+ < threshold 0\.9999 \(sentence 2 of 2"):
        parity.check_embeddings(mean_pool_onnx.path, token_ids, reference, threshold=0.9999)


def test_a_shape_mismatch_is_a_parity_error(mean_pool_onnx):
    with pytest.raises(ParityError, match="shape"):
        parity.check_embeddings(mean_pool_onnx.path, [[1]], np.ones((1, 3), np.float32), threshold=0.9)
