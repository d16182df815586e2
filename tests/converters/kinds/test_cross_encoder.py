"""A CrossEncoder converts as itself: pairs in, predict's scores out; classifiers are refused."""

from __future__ import annotations

from tests import tiny_models
from tests.converters.conftest import run_converter


def spec_for(model, repository) -> dict:
    return {"model_name": "org/reranker", "model_path": str(model), "triton_name": "org--reranker",
            "repository": str(repository)}


def test_a_reranker_records_its_scores_parity_and_inputs(tmp_path):
    run = run_converter(spec_for(tiny_models.cross_encoder(tmp_path / "model"), tmp_path / "repository"))
    assert run.returncode == 0, run.stderr[-2000:]
    metadata = run.last_line
    assert metadata["kind"] == "cross_encoder" and metadata["embedding_dim"] == 1
    assert metadata["cross_encoder"] == {
        "num_labels": 1, "activation": "torch.nn.modules.activation.Sigmoid", "token_type_ids": True,
    }
    assert metadata["parity"]["max_abs_error"] <= metadata["parity"]["threshold"] == 1e-4
    config = (tmp_path / "repository" / "org--reranker" / "config.pbtxt").read_text()
    assert 'name: "token_type_ids"' in config and 'name: "scores"' in config


def test_a_classifier_with_several_labels_is_refused(tmp_path):
    bert = tiny_models.save_bert(tmp_path / "nli", head="classification", num_labels=3)
    run = run_converter(spec_for(bert, tmp_path / "repository"))
    assert run.returncode == 8, run.stderr[-2000:]
    assert "3 labels" in run.last_line["error"]
    assert not (tmp_path / "repository" / "org--reranker").exists()
