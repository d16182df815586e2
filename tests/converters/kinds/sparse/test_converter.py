"""A SPLADE SparseEncoder converts as itself; other sparse architectures are refused."""

from __future__ import annotations

from embedgate.converters.kinds.sparse.converter import _splade_refusal
from tests import tiny_models
from tests.converters.conftest import run_converter


def test_splade_records_its_vocabulary_output_and_top_k(tmp_path):
    model = tiny_models.sparse_encoder(tmp_path / "model", max_active_dims=7)
    run = run_converter({"model_name": "org/splade", "model_path": str(model), "triton_name": "org--splade",
                         "repository": str(tmp_path / "repository")})
    assert run.returncode == 0, run.stderr[-2000:]
    metadata = run.last_line
    assert metadata["kind"] == "sparse_encoder" and metadata["normalized"] is False
    assert metadata["sparse"] == {"max_active_dims": 7, "pooling": "max", "activation": "relu"}
    assert metadata["parity"]["min_cosine"] >= 0.9999


class Transformer:
    transformer_task = "fill-mask"


class SpladePooling:
    pass


class Router:
    pass


def test_only_an_mlm_transformer_then_splade_pooling_is_served():
    assert _splade_refusal([Transformer(), SpladePooling()]) is None
    assert "Router" in _splade_refusal([Router()])
    assert "Transformer -> SpladePooling -> Router" in _splade_refusal([Transformer(), SpladePooling(), Router()])
    feature = Transformer()
    feature.transformer_task = "feature-extraction"
    assert "'feature-extraction'" in _splade_refusal([feature, SpladePooling()])
