"""An OpenCLIP model's record, its text tokenization: one type per OpenCLIP tokenizer, told
apart by ``tokenizer``, with metadata written before that field existed read as
SimpleTokenizer's."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from embedgate.contract.kinds.clip import ClipMetadata, ClipsLayout, ClipText, HFClipText

IMAGE = {"height": 224, "width": 224, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
PARITY = {"passed": True, "threshold": 0.9999, "min_cosine": 1.0, "images": 1}
# A ClipMetadata's "text" as metadata.json holds it for a model published before the
# tokenizer field.
SIMPLE_BEFORE = {"context_length": 77, "sot_token_id": 49406, "eot_token_id": 49407, "clean": "lower", "word_pattern": "x"}


def clip_metadata(text: dict) -> ClipMetadata:
    return ClipMetadata.model_validate({"pretrained": "p", "text": text, "image": IMAGE, "image_parity": PARITY})


def test_metadata_without_the_tokenizer_field_is_simple_tokenizer():
    text = clip_metadata(SIMPLE_BEFORE).text
    assert isinstance(text, ClipText) and text.tokenizer == "simple"
    assert text == ClipText(**SIMPLE_BEFORE)


@pytest.mark.parametrize(
    "text",
    [
        ClipText(**SIMPLE_BEFORE),
        HFClipText(context_length=64, clean="canonicalize", pad_token_id=1),
        HFClipText(context_length=32, pad_token_id=0, padding_side="left", strip_sep_token_id=102),
        HFClipText(context_length=32, pad_token_id=0, clips=ClipsLayout(bos_token_id=1, eos_token_id=2, cls_token_id=3)),
    ],
)
def test_each_kind_round_trips_through_json(text):
    metadata = clip_metadata(text.model_dump())
    assert type(metadata.text) is type(text) and metadata.text == text
    assert ClipMetadata.model_validate_json(metadata.model_dump_json()) == metadata


def test_an_hf_text_without_its_pad_id_is_invalid():
    with pytest.raises(ValidationError, match="pad_token_id"):
        clip_metadata({"tokenizer": "hf", "context_length": 64})
