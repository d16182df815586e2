"""metadata.json's record of a model's kind: read from the key its kind's record names, as
files on disk have always held it, written back the same, and read through ``record_of``."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from embedgate.contract.kinds.clip import ClipMetadata
from embedgate.contract.kinds.cross_encoder import CrossEncoderInfo
from embedgate.contract.kinds.dense import DenseInfo
from embedgate.contract.kinds.multi_vector import MultiVectorInfo
from embedgate.contract.kinds.multimodal import MultimodalMetadata
from embedgate.contract.kinds.vision_language import VisionLanguageMetadata
from embedgate.contract.kinds.sparse import SparseInfo
from embedgate.contract.spec import ModelMetadata

PARITY = {"passed": True, "threshold": 0.9999, "min_cosine": 1.0, "sentences": 1, "mean_cosine": None,
          "max_abs_error": None}
TASK = {"max_length": 16, "expansion": None, "skiplist": [], "keep_only": None}
# Each kind's record as metadata.json holds it, under its key.
RECORDS = {
    "sparse_encoder": ("sparse", SparseInfo, {"max_active_dims": 7, "pooling": "max", "activation": "relu"}),
    "cross_encoder": ("cross_encoder", CrossEncoderInfo, {
        "num_labels": 3, "activation": "torch.nn.modules.linear.Identity", "token_type_ids": True, "logits": True,
        "labels": ["a", "b", "c"], "chat_template": None, "logit_score": None,
    }),
    "multi_vector_encoder": ("multi_vector", MultiVectorInfo, {
        "similarity": "maxsim", "query": {**TASK, "expansion": {"strategy": "fixed", "attend": True, "token_id": 103,
                                                                "length": 8}},
        "document": TASK, "default": {**TASK, "keep_only": [5]},
    }),
    "clip": ("clip", ClipMetadata, {
        "pretrained": "tag",
        "text": {"tokenizer": "simple", "context_length": 77, "sot_token_id": 1, "eot_token_id": 2, "clean": "lower",
                 "word_pattern": "x"},
        "image": {"height": 224, "width": 196, "resize_mode": "shortest", "interpolation": "bicubic", "fill_color": 0,
                  "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
        "image_parity": {"passed": True, "threshold": 0.9999, "min_cosine": 1.0, "images": 1},
        "image_gpu": None,
    }),
    "multimodal": ("multimodal", MultimodalMetadata, {
        "modalities": ["text", "image"],
        "image": {"preparation": "processor", "processor": "CLIPImageProcessor", "backend": "torchvision",
                  "shortest_edge": 224, "resize_height": None, "resize_width": None, "interpolation": "bicubic",
                  "crop_height": 224, "crop_width": 224, "height": 224, "width": 224, "rescale": 1 / 255,
                  "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
        "image_parity": {"passed": True, "threshold": 0.9999, "min_cosine": 1.0, "images": 1},
        "pixel_max_error": 0.0,
        "image_gpu": None,
    }),
    "vision_language": ("vision_language", VisionLanguageMetadata, {
        "modalities": ["text", "image", "message"],
        "template": {"text": {"before": "<u>", "between": "", "after": "</u>"},
                     "prompted": {"before": "<s>", "between": "</s><u>", "after": "</u>"},
                     "image": "<v><i></v>", "image_token": "<i>", "image_token_id": 5, "suffix_ids": [2, 7],
                     "parts_joined": True},
        "images": {"preparation": "patches", "patch_size": 14, "merge_size": 2, "temporal_patch_size": 2,
                   "min_pixels": 3136, "max_pixels": 12544, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5],
                   "rescale": 1 / 255},
        "image_hidden": 32, "image_levels": 2, "position_grid": 48, "window_size": 0,
        "image_parity": {"passed": True, "threshold": 0.9999, "min_cosine": 1.0, "images": 1},
        "pixel_max_error": 0.0,
    }),
}


def on_disk(kind: str, **changes) -> dict:
    """A metadata.json as embedgate has written it: every kind's key, null but the model's own."""
    fields = {
        "format_version": 1, "kind": kind, "model_name": "m", "triton_name": "m", "source": "s", "library": "l",
        "library_version": "0", "embedding_dim": 3, "max_seq_length": 16, "normalized": False,
        "do_lower_case": False, "strip_whitespace": False, "form": "python", "max_batch_size": 8,
        "dynamic_batching": True, "instance_count": 1, "parity": PARITY, "created_at": "2026-01-01T00:00:00+00:00",
        "conversion_seconds": 0.0, "made_from": None, "clip": None, "dense": None, "variant": None, "packed_parity": None,
        "prompts": {} if kind == "clip" else None, "default_prompt_name": None, "prompts_refused": None,
        "cross_encoder": None, "sparse": None, "multi_vector": None, "multimodal": None, "vision_language": None,
        "routes": None, "gpu": None,
        "calibration": None, "graph_inputs": {"m": ["input_ids", "attention_mask"]},
    }
    if kind in RECORDS:
        key, _, record = RECORDS[kind]
        fields[key] = record
    return {**fields, **changes}


DENSE = ("dense", DenseInfo, {"prompt_exclusion": {"special_ids": [0, 2, 3], "parity": PARITY},
                              "late_chunking": {"parity": PARITY}, "late_chunking_refusal": None})


@pytest.mark.parametrize("kind", ["sentence_transformer", *RECORDS])
def test_metadata_json_reads_and_writes_back_as_on_disk(kind):
    stored = on_disk(kind)
    metadata = ModelMetadata.model_validate_json(json.dumps(stored))
    if kind in RECORDS:
        _, record_class, record = RECORDS[kind]
        assert type(metadata.record) is record_class and metadata.record == record_class.model_validate(record)
    else:
        assert metadata.record is None
    assert json.loads(metadata.model_dump_json()) == stored
    assert ModelMetadata.model_validate(metadata.model_dump()) == metadata
    # Written before sources were recorded: read, its source unknown.
    older = {key: value for key, value in stored.items() if key != "made_from"}
    assert ModelMetadata.model_validate_json(json.dumps(older)).made_from is None


def test_a_cross_encoder_recorded_before_llm_rerankers_reads_as_one_without_them():
    stored = on_disk("cross_encoder")
    stored["cross_encoder"] = {key: value for key, value in stored["cross_encoder"].items()
                               if key not in ("chat_template", "logit_score")}
    info = ModelMetadata.model_validate(stored).record_of(CrossEncoderInfo)
    assert info.chat_template is None and info.logit_score is None


def test_a_sentence_transformer_records_how_it_pools_a_prompt_where_it_leaves_it_out():
    key, record_class, record = DENSE
    stored = on_disk("sentence_transformer", **{key: record})
    metadata = ModelMetadata.model_validate_json(json.dumps(stored))
    assert metadata.record_of(record_class).prompt_exclusion.special_ids == [0, 2, 3]
    assert json.loads(metadata.model_dump_json()) == stored
    # Converted before it recorded one, or pooling every token: none.
    assert ModelMetadata.model_validate(on_disk("sentence_transformer")).record_of(record_class) is None


def test_a_record_is_read_as_its_own_class_or_none():
    metadata = ModelMetadata.model_validate(on_disk("cross_encoder"))
    assert metadata.record_of(CrossEncoderInfo).labels == ["a", "b", "c"]
    assert metadata.record_of(ClipMetadata) is None
    assert ModelMetadata.model_validate(on_disk("cross_encoder", cross_encoder=None)).record_of(CrossEncoderInfo) is None


def test_a_record_made_in_code_is_written_under_its_key():
    stored = on_disk("sparse_encoder")
    record = SparseInfo(max_active_dims=7, pooling="max", activation="relu")
    made = ModelMetadata(**{key: value for key, value in stored.items() if key != "sparse"}, record=record)
    assert made.record is record and json.loads(made.model_dump_json()) == stored


def test_a_record_of_another_kind_is_refused():
    record = SparseInfo(max_active_dims=7, pooling="max", activation="relu")
    with pytest.raises(ValidationError, match="a cross_encoder model records no SparseInfo"):
        ModelMetadata(**on_disk("cross_encoder", cross_encoder=None), record=record)
    with pytest.raises(ValidationError, match="a sentence_transformer model records no SparseInfo"):
        ModelMetadata(**on_disk("sentence_transformer"), record=record)


def test_an_invalid_record_is_invalid_metadata():
    stored = on_disk("clip")
    stored["clip"] = {**stored["clip"], "image": {**stored["clip"]["image"], "height": 0}}
    with pytest.raises(ValidationError, match="image.height"):
        ModelMetadata.model_validate_json(json.dumps(stored))


def test_a_kind_this_version_does_not_know_loads_without_its_record():
    # Its model is refused when served (api/compute/requests/kinds: kind_of), not when read.
    metadata = ModelMetadata.model_validate(on_disk("hologram", hologram={"beams": 3}))
    assert metadata.kind == "hologram" and metadata.record is None


def test_a_kind_without_prompts_has_none_rather_than_unknown():
    assert ModelMetadata.model_validate(on_disk("clip", prompts=None)).prompts == {}
    assert ModelMetadata.model_validate(on_disk("cross_encoder")).prompts is None
