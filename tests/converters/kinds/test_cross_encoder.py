"""A CrossEncoder converts as itself: texts and pairs in, logits out, to which the gateway
applies predict's activation (checked with the gateway's own code); rerankers and classifiers
alike, a classifier's labels named as its id2label names them."""

from __future__ import annotations

from embedgate.converters.kinds.cross_encoder import _classifier_refusal, _gateway_applies
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
        "logits": True, "labels": ["LABEL_0"],
    }
    assert metadata["parity"]["max_abs_error"] <= metadata["parity"]["threshold"] == 1e-4
    # Pairs and single texts, short and past max_length.
    assert metadata["parity"]["sentences"] == 26
    config = (tmp_path / "repository" / "org--reranker" / "config.pbtxt").read_text()
    assert 'name: "token_type_ids"' in config and 'name: "logits"' in config


def test_a_classifier_with_several_labels_converts_with_their_names(tmp_path):
    run = run_converter(spec_for(tiny_models.classifier(tmp_path / "model"), tmp_path / "repository"))
    assert run.returncode == 0, run.stderr[-2000:]
    info = run.last_line["cross_encoder"]
    assert info["num_labels"] == 3 and info["labels"] == list(tiny_models.NLI_LABELS)
    # Several labels: predict applies no activation unless the model names one.
    assert info["activation"] == "torch.nn.modules.linear.Identity" and info["logits"]
    assert run.last_line["embedding_dim"] == 3


def test_only_a_sequence_classification_transformer_alone_is_served():
    class Transformer:
        transformer_task = "sequence-classification"

    class LogitScore:
        pass

    assert _classifier_refusal([Transformer()]) is None
    assert "Transformer -> LogitScore" in _classifier_refusal([Transformer(), LogitScore()])
    causal = Transformer()
    causal.transformer_task = "text-generation"
    assert "'text-generation'" in _classifier_refusal([causal])


def test_the_gateway_applies_the_activations_it_knows_the_others_stay_in_the_graph():
    import torch

    assert _gateway_applies(torch.nn.Sigmoid()) and _gateway_applies(torch.nn.Softmax(dim=-1))
    assert not _gateway_applies(torch.nn.Softmax(dim=0))  # across inputs: not an input's own
    assert not _gateway_applies(torch.nn.GELU())
