"""A CrossEncoder converts as itself: texts and pairs in, logits out, to which the gateway
applies predict's activation (checked with the gateway's own code); rerankers and classifiers
alike, a classifier's labels named as its id2label names them; LLM rerankers, scored by their
next token (LogitScore) or by a classification head, their pairs through their chat template."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embedgate.converters.kinds.cross_encoder.converter import _refusal
from embedgate.converters.kinds.cross_encoder.reference import gateway_applies
from tests import llm_rerankers, tiny_models
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
        "logits": True, "labels": ["LABEL_0"], "chat_template": None, "logit_score": None,
    }
    assert metadata["parity"]["max_abs_error"] <= metadata["parity"]["threshold"] == 1e-4
    # Pairs and single texts, short and past max_length.
    assert metadata["parity"]["sentences"] == 26
    config = (tmp_path / "repository" / "org--reranker" / "config.pbtxt").read_text()
    assert 'name: "token_type_ids"' in config and 'name: "logits"' in config


@pytest.mark.parametrize("labels", [("LABEL_0",), tiny_models.NLI_LABELS], ids=["reranker", "classifier"])
def test_a_deberta_v2_graph_is_fed_only_the_inputs_it_reads(tmp_path, labels):
    """DeBERTa-v2 (v3's layout) has no token type embeddings while its tokenizer gives
    token_type_ids: the exported graph reads no such input, so neither the parity check nor
    the gateway (its config, its record) feeds one, and its scores are CrossEncoder.predict's."""
    import onnxruntime
    from sentence_transformers import CrossEncoder
    from tokenizers import Tokenizer

    model_dir = tiny_models.cross_encoder_of("deberta-v2", tmp_path / "model", labels=labels)
    run = run_converter(spec_for(model_dir, tmp_path / "repository"))
    assert run.returncode == 0, run.stderr[-2000:]
    info = run.last_line["cross_encoder"]
    assert info["num_labels"] == len(labels) and not info["token_type_ids"]
    published = tmp_path / "repository" / "org--reranker"
    assert 'name: "token_type_ids"' not in (published / "config.pbtxt").read_text()
    session = onnxruntime.InferenceSession(str(published / "1" / "model.onnx"))
    assert [value.name for value in session.get_inputs()] == ["input_ids", "attention_mask"]

    pairs = [("how do tiny models rank", "they rank the words they know"), ("a query", "an unrelated answer"),
             ("short", "a much longer document about many other words than the query has")]
    tokenizer = Tokenizer.from_file(str(published / "tokenizer" / "tokenizer.json"))
    tokenizer.enable_padding()
    encoded = tokenizer.encode_batch(pairs)
    logits = session.run(None, {
        "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
    })[0]
    expected = CrossEncoder(str(model_dir), device="cpu").predict(pairs, activation_fn=torch.nn.Identity())
    assert np.abs(logits.reshape(expected.shape) - expected).max() < 1e-4
    # Pairs score differently: a graph that ignored the document would not pass.
    assert np.ptp(expected) > 1e-3


def test_a_classifier_with_several_labels_converts_with_their_names(tmp_path):
    run = run_converter(spec_for(tiny_models.classifier(tmp_path / "model"), tmp_path / "repository"))
    assert run.returncode == 0, run.stderr[-2000:]
    info = run.last_line["cross_encoder"]
    assert info["num_labels"] == 3 and info["labels"] == list(tiny_models.NLI_LABELS)
    # Several labels: predict applies no activation unless the model names one.
    assert info["activation"] == "torch.nn.modules.linear.Identity" and info["logits"]
    assert run.last_line["embedding_dim"] == 3


def test_an_llm_reranker_scores_its_next_token_through_its_chat_template(tmp_path):
    run = run_converter(spec_for(llm_rerankers.causal_reranker(tmp_path / "model"), tmp_path / "repository"))
    assert run.returncode == 0, run.stderr[-2000:]
    info = run.last_line["cross_encoder"]
    assert info["num_labels"] == 1 and info["logits"] and not info["token_type_ids"]
    assert info["activation"] == "torch.nn.modules.activation.Sigmoid"
    assert (info["logit_score"]["true_token"], info["logit_score"]["false_token"]) == ("yes", "no")
    template = info["chat_template"]
    assert template["plain"]["slots"] == ["query", "document"] and template["restore_suffix"]
    assert template["prompted"]["slots"] == ["prompt", "query", "document"]
    # Pairs only (short, and past max_length with the long text first, second and both).
    parity = run.last_line["parity"]
    assert parity["sentences"] == 14 and parity["max_abs_error"] <= 1e-4
    assert "checking that the gateway renders it as the library does" in run.stderr
    # Two logits of the head (not its 600 rows): the graph is the LM's body and two rows.
    graph = tmp_path / "repository" / "org--reranker" / "1" / "model.onnx"
    assert graph.stat().st_size < 400_000


def test_its_sequence_classification_form_and_its_text_pairs_convert_too(tmp_path):
    classifier = run_converter(spec_for(
        llm_rerankers.sequence_classification_reranker(tmp_path / "seq-cls"), tmp_path / "repository-seq-cls"
    ))
    assert classifier.returncode == 0, classifier.stderr[-2000:]
    info = classifier.last_line["cross_encoder"]
    assert info["logit_score"] is None and info["chat_template"] is not None
    # Without a chat template its pairs are text pairs: single texts are scored as well.
    plain = run_converter(spec_for(
        llm_rerankers.causal_reranker(tmp_path / "plain", chat_template=None), tmp_path / "repository-plain"
    ))
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert plain.last_line["cross_encoder"]["chat_template"] is None
    assert plain.last_line["cross_encoder"]["logit_score"] is not None
    assert plain.last_line["parity"]["sentences"] == 26


def test_the_module_stacks_served_and_the_others_refused():
    class Transformer:
        transformer_task = "sequence-classification"
        module_output_name = "causal_logits"

    class LogitScore:
        module_input_name = "causal_logits"

    class Dense:
        pass

    assert _refusal([Transformer()]) is None
    causal = Transformer()
    causal.transformer_task = "text-generation"
    assert "'text-generation'" in _refusal([causal])
    assert _refusal([causal, LogitScore()]) is None
    assert "before LogitScore is 'sequence-classification'" in _refusal([Transformer(), LogitScore()])
    elsewhere = LogitScore()
    elsewhere.module_input_name = "token_embeddings"
    assert "reads 'token_embeddings'" in _refusal([causal, elsewhere])
    assert "Transformer -> Dense" in _refusal([Transformer(), Dense()])


def test_the_gateway_applies_the_activations_it_knows_the_others_stay_in_the_graph():
    import torch

    assert gateway_applies(torch.nn.Sigmoid()) and gateway_applies(torch.nn.Softmax(dim=-1))
    assert not gateway_applies(torch.nn.Softmax(dim=0))  # across inputs: not an input's own
    assert not gateway_applies(torch.nn.GELU())
