"""Generated payloads: deterministic, and the token lengths the workload promises."""

import base64
import io
import random

import pytest
from PIL import Image

from embedgate.bench.payloads import (
    WORDS,
    FilePayload,
    ImagePayload,
    LongPayload,
    RepeatingPayload,
    SentencePayload,
    build_payload,
    sentence,
)


def test_every_word_is_one_token_so_sentence_lengths_are_exact(minilm_tokenizer):
    counts = minilm_tokenizer.encode(WORDS + [w.capitalize() for w in WORDS]).token_counts
    assert set(counts) == {3}  # [CLS] word [SEP]
    rng = random.Random(1)
    for words in (1, 5, 27):
        assert minilm_tokenizer.encode([sentence(rng, words)]).token_counts == [words + 3]


def test_mixed_sentences_span_8_to_30_tokens(minilm_tokenizer):
    payload = SentencePayload(per_request=1, seed=3)
    texts = [payload.inputs(i)[0] for i in range(600)]
    counts = minilm_tokenizer.encode(texts).token_counts
    assert min(counts) == 8 and max(counts) == 30
    # Mixed, not clustered: every length in the range occurs.
    assert set(counts) == set(range(8, 31))


def test_requests_are_deterministic_and_distinct():
    payload = SentencePayload(per_request=32, seed=7)
    assert payload.inputs(5) == SentencePayload(per_request=32, seed=7).inputs(5)
    assert len(payload.inputs(5)) == 32
    assert payload.inputs(5) != payload.inputs(6)
    assert payload.inputs(5) != SentencePayload(per_request=32, seed=8).inputs(5)


def test_long_texts_come_close_to_the_max_length_without_passing_it(minilm_tokenizer):
    payload = LongPayload(max_length=256, per_request=4, seed=0)
    texts = [t for i in range(20) for t in payload.inputs(i)]
    encoded = minilm_tokenizer.encode(texts)
    assert encoded.truncated == 0
    assert min(encoded.token_counts) >= 256 * 0.9 - 2
    assert max(encoded.token_counts) <= 256


def test_file_payload_takes_lines_in_order_and_wraps(tmp_path):
    path = tmp_path / "inputs.txt"
    path.write_text("one\n\ntwo\nthree\n")
    payload = FilePayload.from_file(path, per_request=2)
    assert payload.inputs(0) == ["one", "two"]
    assert payload.inputs(1) == ["three", "one"]
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(ValueError, match="no non-empty lines"):
        FilePayload.from_file(tmp_path / "empty.txt", 1)


def test_images_are_decodable_jpegs_of_the_asked_size_and_deterministic():
    payload = ImagePayload(per_request=3, seed=1, size=64, pool=4)
    uris = payload.inputs(0)
    assert len(uris) == 3 and len(set(uris)) == 3
    header, data = uris[0].split(",", 1)
    assert header == "data:image/jpeg;base64"
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert image.format == "JPEG" and image.size == (64, 64) and image.mode == "RGB"
    assert ImagePayload(per_request=3, seed=1, size=64, pool=4).inputs(0) == uris
    assert payload.inputs(1)[0] == payload.pool[3]  # request 1 continues through the pool


def test_build_payload_checks_what_each_kind_needs(tmp_path):
    assert build_payload("single", batch_size=32, seed=0).per_request == 1
    assert build_payload("batch", batch_size=8, seed=0).per_request == 8
    with pytest.raises(ValueError, match="max sequence length"):
        build_payload("long", batch_size=1, seed=0)
    with pytest.raises(ValueError, match="--input-file"):
        build_payload("file", batch_size=1, seed=0)
    with pytest.raises(ValueError, match="unknown payload"):
        build_payload("video", batch_size=1, seed=0)


def test_a_repeating_payload_repeats_its_share_of_inputs_from_a_hot_set():
    base = SentencePayload(per_request=32, seed=3)
    payload = build_payload("batch", batch_size=32, seed=3, repeat=0.5)
    assert isinstance(payload, RepeatingPayload) and payload.per_request == 32 and payload.kind == "text"
    requests = [payload.inputs(index) for index in range(200)]
    assert requests[7] == payload.inputs(7)  # deterministic
    inputs = [text for request in requests for text in request]
    own = [text for index, request in enumerate(requests) for text in request if text in base.inputs(index)]
    repeated = [text for text in inputs if text not in own]
    # About half are drawn from the 1000 hot inputs, the rest are new (and never repeat).
    assert 0.45 < len(repeated) / len(inputs) < 0.55
    assert len(set(repeated)) <= 1000 and len(set(repeated)) < len(repeated)
    assert len(set(own)) == len(own)
    assert build_payload("single", batch_size=1, seed=3, repeat=0.0) == SentencePayload(1, 3)
