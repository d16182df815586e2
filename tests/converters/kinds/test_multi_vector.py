"""A MultiVectorEncoder converts as itself: a graph of a vector per token, and how each task
tokenizes and keeps its tokens, checked against encode_query / encode_document / encode
(with their markers) and MaxSim against the library's; modules the gateway cannot apply are
refused."""

from __future__ import annotations

import pytest

from embedgate.contract.kinds.multi_vector import MultiVectorInfo
from embedgate.contract.spec import ModelMetadata
from embedgate.converters.kinds.multi_vector import _multi_vector_refusal
from embedgate.converters.triton_config import LENGTH_INPUT_PARAMETER, parse
from tests import tiny_models
from tests.converters.conftest import run_converter


@pytest.mark.parametrize("attend", [False, True])
def test_each_task_is_recorded_and_checked(tmp_path, attend):
    model = tiny_models.multi_vector_model(tmp_path / "model", attend=attend)
    run = run_converter({"model_name": "org/colbert", "model_path": str(model), "triton_name": "org--colbert",
                         "repository": str(tmp_path / "repository")})
    assert run.returncode == 0, run.stderr[-2000:]
    metadata = ModelMetadata.model_validate(run.last_line)
    info = metadata.record_of(MultiVectorInfo)
    assert metadata.kind == "multi_vector_encoder" and metadata.embedding_dim == 16 and metadata.normalized
    assert info.similarity == "maxsim"
    expansion = info.query.expansion
    assert (expansion.strategy, expansion.attend, expansion.length) == ("fixed", attend, tiny_models.QUERY_EXPANSION)
    assert info.query.max_length == tiny_models.QUERY_EXPANSION and info.query.skiplist == []
    assert info.document.max_length == 48 and len(info.document.skiplist) == len(tiny_models.PUNCTUATION)
    assert info.default.max_length == tiny_models.MAX_SEQ_LENGTH and info.default.skiplist == info.document.skiplist
    assert metadata.prompts == {"query": "[Q] ", "document": "[D] "}
    assert metadata.parity.min_cosine >= 0.9999 and metadata.parity.max_abs_error <= 1e-4
    config = parse((tmp_path / "repository" / "org--colbert" / "config.pbtxt").read_text())
    assert list(config.output[0].dims) == [-1, 16]
    # Expansion tokens the encoder does not attend to are computed all the same: rows are
    # not cut at their attention mask then.
    assert (LENGTH_INPUT_PARAMETER in config.parameters) == attend


class Transformer:
    transformer_task = "feature-extraction"
    modality_config = {"text": {}}


class Dense:
    pass


class MultiVectorMask:
    pass


class MaxPoolTokenPooling:
    pass


def test_only_token_level_dense_normalize_and_one_mask_are_served():
    assert _multi_vector_refusal([Transformer(), Dense(), MultiVectorMask()]) is None
    assert "MaxPoolTokenPooling" in _multi_vector_refusal([Transformer(), MultiVectorMask(), MaxPoolTokenPooling()])
    assert "one MultiVectorMask" in _multi_vector_refusal([Transformer(), Dense()])
    image = Transformer()
    image.transformer_task = "retrieval"
    assert "'retrieval'" in _multi_vector_refusal([image, MultiVectorMask()])
