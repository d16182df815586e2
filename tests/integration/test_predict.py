"""Sequence classification on ``POST /predict`` through the real gateway and tritonserver, in
TEI's shape: a 3-label classifier's scores for a text, a pair and a batch of both, with its
activation as ``CrossEncoder.predict`` applies it or as raw logits, each label named as its
``id2label`` names it, best first; a reranker answers /predict too, a classifier no /rerank.
DeBERTa-v2 (v3's layout: no token types, which its tokenizer gives) as a classifier and a
reranker, on every route that scores pairs."""

from __future__ import annotations

import numpy as np
import pytest

from tests import tiny_models

from .conftest import MINILM, models_loaded

NLI = "org/tiny-nli"
RERANKER = "org/tiny-predict-reranker"
TEXT = "a man is eating food at the bank"
PAIR = ["a man is eating food", "the man eats nothing"]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)


@pytest.fixture(scope="module")
def models(gateway, tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    directories = {
        NLI: tiny_models.classifier(root / "nli"), RERANKER: tiny_models.cross_encoder(root / "reranker"),
    }
    with models_loaded(gateway, directories):
        yield directories


@pytest.fixture(scope="module")
def references(models):
    import torch
    from sentence_transformers import CrossEncoder

    loaded = {name: CrossEncoder(str(directory), device="cpu") for name, directory in models.items()}

    def predict(name, item, raw=False):
        options = {"activation_fn": torch.nn.Identity()} if raw else {}
        scores = loaded[name].predict(item if isinstance(item, str) else [list(item)], **options)
        return np.atleast_1d(np.asarray(scores, dtype=np.float64).reshape(-1))

    return predict


def scores_of(predictions: list[dict], labels) -> np.ndarray:
    assert [p["score"] for p in predictions] == sorted((p["score"] for p in predictions), reverse=True)
    by_label = {p["label"]: p["score"] for p in predictions}
    return np.asarray([by_label[label] for label in labels])


def test_a_text_a_pair_and_a_batch_get_predicts_scores_per_label(http, models, references):
    labels = tiny_models.NLI_LABELS
    one = http.post("/predict", json={"model": NLI, "inputs": TEXT})
    assert one.status_code == 200, one.text
    np.testing.assert_allclose(scores_of(one.json(), labels), references(NLI, TEXT), atol=1e-4)
    pair = http.post("/predict", json={"model": NLI, "inputs": PAIR})
    assert pair.status_code == 200, pair.text
    np.testing.assert_allclose(scores_of(pair.json(), labels), references(NLI, tuple(PAIR)), atol=1e-4)
    batch = [[TEXT + " again"], PAIR[::-1], [LONG, TEXT]]
    answer = http.post("/predict", json={"model": NLI, "inputs": batch})
    assert answer.status_code == 200, answer.text
    assert len(answer.json()) == 3 and int(answer.headers["x-truncated-inputs"]) == 1
    expected = [references(NLI, item[0] if len(item) == 1 else tuple(item)) for item in batch]
    assert np.abs(expected[0] - expected[1]).max() > 0.01
    for predictions, want in zip(answer.json(), expected):
        np.testing.assert_allclose(scores_of(predictions, labels), want, atol=1e-4)


def test_a_rerankers_activation_and_its_raw_scores(http, models, references):
    activated = http.post("/predict", json={"model": RERANKER, "inputs": PAIR})
    raw = http.post("/predict", json={"model": RERANKER, "inputs": PAIR, "raw_scores": True})
    assert activated.status_code == raw.status_code == 200, activated.text
    (score,), (logit,) = [[p["score"] for p in answer.json()] for answer in (activated, raw)]
    assert activated.json()[0]["label"] == "LABEL_0"
    np.testing.assert_allclose(score, references(RERANKER, tuple(PAIR))[0], atol=1e-4)
    np.testing.assert_allclose(logit, references(RERANKER, tuple(PAIR), raw=True)[0], atol=1e-4)
    assert 0 < score < 1 and abs(logit - score) > 1e-3


def test_a_classifier_does_not_rerank_and_an_embedder_does_not_predict(http, models, minilm_loaded):
    refused = http.post("/rerank", json={"model": NLI, "query": "a", "documents": ["b"]})
    assert refused.status_code == 400 and "POST /predict" in refused.json()["error"]["message"]
    embedder = http.post("/predict", json={"model": MINILM, "inputs": TEXT})
    assert embedder.status_code == 400 and embedder.json()["error"]["code"] == "wrong_model_kind"
    assert "gives no label scores" in embedder.json()["error"]["message"]
    assert "POST /infer" in embedder.json()["error"]["message"]
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert listed[NLI]["num_labels"] == 3 and listed[NLI]["labels"] == list(tiny_models.NLI_LABELS)


def test_bad_inputs_are_400s_and_422s(http, models):
    assert http.post("/predict", json={"model": NLI, "inputs": ["one", "two", "three"]}).status_code == 422
    assert http.post("/predict", json={"model": NLI, "inputs": "a", "truncate": False}).status_code == 422
    assert http.post("/predict", json={"model": NLI, "inputs": []}).status_code == 422
    assert http.post("/predict", json={"model": NLI, "inputs": "a", "prompt_name": "x", "prompt": "y"}).status_code == 400
