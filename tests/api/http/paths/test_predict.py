"""POST /predict in TEI's shape: a text, a pair or a batch in; each label's score out, best
first, with the model's activation (or the logits, with raw_scores); bad inputs refused."""

from __future__ import annotations

import pytest

from embedgate.api.compute.requests.asks import Output

from .test_inference import assert_error

CLASSIFIER = {
    "kind": "cross_encoder", "embedding_dim": 3,
    "cross_encoder": {
        "num_labels": 3, "activation": "torch.nn.modules.activation.Softmax", "token_type_ids": True,
        "logits": True, "labels": ["contradiction", "entailment", "neutral"],
    },
}


@pytest.fixture
def classifier(gateway):
    gateway.registry.changes["org/loaded"] = CLASSIFIER
    return gateway


def scores(predictions):
    return {p["label"]: p["score"] for p in predictions}


def test_a_text_gets_each_labels_score_best_first_with_the_activation(client, classifier):
    response = client.post("/predict", json={"model": "org/loaded", "inputs": "a text"})
    assert response.status_code == 200, response.text
    predictions = response.json()
    # The fake's logits are [0, 1, 2]: softmax, best first.
    assert [p["label"] for p in predictions] == ["neutral", "entailment", "contradiction"]
    assert sum(p["score"] for p in predictions) == pytest.approx(1.0)
    assert response.headers["x-truncated-inputs"] == "0"
    assert classifier.embeddings.calls == [("org/loaded", ["a text"], True)]


def test_raw_scores_are_the_logits(client, classifier):
    response = client.post("/predict", json={"model": "org/loaded", "inputs": "a text", "raw_scores": True})
    assert scores(response.json()) == {"contradiction": 0.0, "entailment": 1.0, "neutral": 2.0}


def test_a_pair_and_a_batch_of_texts_and_pairs(client, classifier):
    pair = client.post("/predict", json={"model": "org/loaded", "inputs": ["premise", "hypothesis"]})
    assert pair.status_code == 200 and len(pair.json()) == 3
    batch = client.post("/predict", json={"model": "org/loaded", "inputs": [["one"], ["a", "b"]], "prompt_name": None})
    assert batch.status_code == 200, batch.text
    assert [len(predictions) for predictions in batch.json()] == [3, 3]
    assert classifier.embeddings.calls[-1] == ("org/loaded", ["one", ("a", "b")], True)


@pytest.mark.parametrize(
    "inputs",
    [["one"], ["one", "two", "three"], [["a", "b", "c"]], [], [[]], 7, [["a"], "b"]],
)
def test_inputs_not_in_teis_shape_are_422(client, classifier, inputs):
    assert_error(client.post("/predict", json={"model": "org/loaded", "inputs": inputs}), 422, "invalid_request")


def test_limits_prompts_and_kinds(client, classifier, settings):
    too_many = [["t"]] * (settings.max_texts_per_request + 1)
    assert_error(client.post("/predict", json={"model": "org/loaded", "inputs": too_many}), 413, "too_many_inputs")
    both = {"model": "org/loaded", "inputs": "a", "prompt_name": "q", "prompt": "q: "}
    assert_error(client.post("/predict", json=both), 400, "bad_request")
    assert_error(client.post("/predict", json={"model": "org/loaded", "inputs": "a", "truncate": False}), 422, "invalid_request")
    # A classifier reranks nothing; an embedding model predicts nothing.
    message = assert_error(
        client.post("/rerank", json={"model": "org/loaded", "query": "q", "documents": ["d"]}), 400, "wrong_model_kind"
    )
    assert "POST /predict" in message
    classifier.registry.changes.pop("org/loaded")
    message = assert_error(client.post("/predict", json={"model": "org/loaded", "inputs": "a"}), 400, "wrong_model_kind")
    assert Output.PREDICT.value in message
