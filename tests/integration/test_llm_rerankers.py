"""LLM rerankers through the real gateway and tritonserver: a Qwen3-style causal LM scored
by its next token (``LogitScore``: logit("yes") - logit("no")) and its sequence-classification
form, each pair rendered by the model's chat template (the prompt as its system message).
Their scores on ``/rerank``, ``/v1/rerank``, TEI's ``/rerank`` (raw, with ``raw_scores``)
and a bulk job's lines are ``CrossEncoder.predict``'s, within 1e-4.

The session's gateway has the response cache on: every answer compared with the library
has a query of its own, and says that none of its inputs came from the cache."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests import llm_rerankers

from .conftest import models_loaded, run_batch
from .test_batches import line

CAUSAL = "org/tiny-llm-reranker"
SEQ_CLS = "org/tiny-llm-reranker-seq-cls"
DOCUMENTS = [
    "the quick brown fox jumps over the lazy dog",
    "stocks fell at the bank",
    "a man is eating food while watching a movie",
    # Past max_length once rendered: cut, and the template's tail written back.
    " ".join(["the lazy dog is over the brown fox"] * 12),
    "hello",
]


@pytest.fixture(scope="module")
def models(gateway, tmp_path_factory):
    root = tmp_path_factory.mktemp("llm-rerankers")
    directories = {
        CAUSAL: llm_rerankers.causal_reranker(root / "causal", prompts=llm_rerankers.PROMPTS),
        SEQ_CLS: llm_rerankers.sequence_classification_reranker(root / "seq-cls", seed=1),
    }
    with models_loaded(gateway, directories) as answers:
        yield directories, answers


@pytest.fixture(scope="module")
def library(models):
    from sentence_transformers import CrossEncoder

    return {name: CrossEncoder(str(directory), device="cpu") for name, directory in models[0].items()}


def computed(response: httpx.Response) -> httpx.Response:
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0", "answered from the response cache"
    return response


def scores_by_index(results: list[dict], key: str = "relevance_score") -> np.ndarray:
    found = {result["index"]: result[key] for result in results}
    assert sorted(found) == list(range(len(found)))
    return np.asarray([found[index] for index in range(len(found))])


def test_both_forms_load_as_rerankers_and_say_how_they_score(http, models):
    _, answers = models
    for name in (CAUSAL, SEQ_CLS):
        assert answers[name]["kind"] == "cross_encoder" and answers[name]["embedding_dim"] == 1
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert listed[CAUSAL]["activation"] == "torch.nn.modules.activation.Sigmoid"
    assert listed[CAUSAL]["prompts"]["web"] == llm_rerankers.PROMPTS["web"]


@pytest.mark.parametrize("name", [CAUSAL, SEQ_CLS])
@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank"])
def test_rerank_scores_are_predicts(http, models, library, name, path):
    import torch

    query = f"what is the quick brown fox ({name}, {path})"
    response = computed(http.post(path, json={"model": name, "query": query, "documents": DOCUMENTS}))
    pairs = [[query, document] for document in DOCUMENTS]
    expected = library[name].predict(pairs)
    assert np.ptp(library[name].predict(pairs, activation_fn=torch.nn.Identity())) > 0.1
    results = response.json()["results"]
    np.testing.assert_allclose(scores_by_index(results), expected, atol=1e-4)
    assert [result["index"] for result in results] == list(np.argsort(-expected, kind="stable"))
    assert int(response.headers["x-truncated-inputs"]) == 1


def test_a_prompt_is_the_templates_instruction_as_predict_gives_it(http, models, library):
    query = "which document answers, with a prompt"
    body = {"model": CAUSAL, "query": query, "documents": DOCUMENTS, "prompt_name": "web"}
    scores = scores_by_index(computed(http.post("/rerank", json=body)).json()["results"])
    pairs = [[query, document] for document in DOCUMENTS]
    expected = library[CAUSAL].predict(pairs, prompt_name="web")
    np.testing.assert_allclose(scores, expected, atol=1e-4)
    assert np.abs(expected - library[CAUSAL].predict(pairs)).max() > 1e-3  # the prompt changed the scores


def test_teis_rerank_gives_the_logits_with_raw_scores_and_predicts_scores_without(gateway, models, library):
    import torch

    url = f"{gateway.url}/tei/{CAUSAL}/rerank"
    for raw in (True, False):
        query = f"what is the quick brown fox (TEI, raw scores {raw})"
        body = {"query": query, "texts": DOCUMENTS, "raw_scores": raw}
        ranks = computed(httpx.post(url, json=body, timeout=120)).json()
        options = {"activation_fn": torch.nn.Identity()} if raw else {}
        expected = library[CAUSAL].predict([[query, document] for document in DOCUMENTS], **options)
        np.testing.assert_allclose(scores_by_index(ranks, "score"), expected, atol=1e-4)


def test_predict_takes_pairs_and_refuses_a_text_alone_saying_why(http, models, library):
    pair = ["what is the quick brown fox, on /predict", DOCUMENTS[0]]
    answer = http.post("/predict", json={"model": CAUSAL, "inputs": pair})
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(answer.json()[0]["score"], library[CAUSAL].predict([pair])[0], atol=1e-4)
    alone = http.post("/predict", json={"model": CAUSAL, "inputs": "a text alone"})
    assert alone.status_code == 400 and "chat template" in alone.json()["error"]["message"]


def test_a_bulk_job_of_rerank_lines_scores_as_predict(gateway, models, library):
    bodies = [
        {"model": name, "query": f"which one, in bulk {i}", "documents": DOCUMENTS[i:], "top_n": 2}
        for i, name in enumerate((CAUSAL, SEQ_CLS, CAUSAL))
    ]
    batch, output, errors = run_batch(gateway, [line(f"q{i}", body, "/v1/rerank") for i, body in enumerate(bodies)],
                                      "/v1/rerank")
    assert batch.status == "completed" and errors == []
    for i, body in enumerate(bodies):
        answer = output[f"q{i}"]["response"]["body"]
        expected = library[body["model"]].predict([[body["query"], document] for document in body["documents"]])
        best = list(np.argsort(-expected, kind="stable")[:2])
        assert [result["index"] for result in answer["results"]] == best
        np.testing.assert_allclose([r["relevance_score"] for r in answer["results"]], expected[best], atol=1e-4)
