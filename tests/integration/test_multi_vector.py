"""A multi-vector (ColBERT-style) model through the real gateway and tritonserver: ``/infer``
answers each text's token vectors as ``encode_query`` / ``encode_document`` / ``encode`` give
them (the markers, the query expansion, the skiplist), ``/rerank`` and ``/v1/rerank`` score by
the library's MaxSim, and bulk jobs' rerank lines answer as the route does. One model's
encoder does not attend to its expansion tokens (the classic ColBERT), the other's does."""

from __future__ import annotations

import numpy as np
import pytest

from tests import tiny_models
from tests.helpers import cosine_rows

from .conftest import assert_reranked_as_online, models_loaded, run_batch
from .test_batches import line

COLBERT = "org/tiny-colbert"
ATTENDING = "org/tiny-colbert-attending"
QUERY = "which fox jumps, quickly?"
DOCUMENTS = [
    "the quick brown fox jumps over the lazy dog.",
    "stocks fell at the bank; a man is eating food!",
    "hello world",
    " ".join(["the lazy dog is over the brown fox ."] * 12),
]


@pytest.fixture(scope="module")
def models(gateway, tmp_path_factory):
    root = tmp_path_factory.mktemp("multi_vector")
    directories = {
        COLBERT: tiny_models.multi_vector_model(root / "colbert"),
        ATTENDING: tiny_models.multi_vector_model(root / "attending", seed=1, attend=True),
    }
    with models_loaded(gateway, directories) as answers:
        assert {answer["kind"] for answer in answers.values()} == {"multi_vector_encoder"}
        yield directories


@pytest.fixture(scope="module")
def references(models):
    from sentence_transformers import MultiVectorEncoder

    return {name: MultiVectorEncoder(str(directory), device="cpu") for name, directory in models.items()}


def token_vectors(response) -> list[np.ndarray]:
    assert response.status_code == 200, response.text
    return [np.asarray(rows, dtype=np.float64) for rows in response.json()["multi_vector_embeddings"]]


def assert_same_tokens(served: list[np.ndarray], expected: list, what: str) -> None:
    assert len(served) == len(expected), what
    for index, (ours, theirs) in enumerate(zip(served, expected)):
        theirs = np.asarray(theirs, dtype=np.float64)
        assert ours.shape == theirs.shape, f"{what}, text {index}: {ours.shape} != {theirs.shape}"
        assert cosine_rows(ours, theirs).min() >= 0.9999, f"{what}, text {index}"


@pytest.mark.parametrize("name", [COLBERT, ATTENDING])
def test_each_task_gives_the_librarys_token_vectors(http, models, references, name):
    model = references[name]
    texts = [QUERY, *DOCUMENTS]
    expected = {
        "query": model.encode_query(texts, convert_to_numpy=True),
        "document": model.encode_document(texts, convert_to_numpy=True),
        None: model.encode(texts, convert_to_numpy=True),
    }
    # A query is expanded to its fixed length; a document keeps no punctuation.
    assert {len(rows) for rows in expected["query"]} == {tiny_models.QUERY_EXPANSION}
    assert len(expected["document"][0]) < len(model.tokenizer("[D] " + texts[0])["input_ids"])
    for task, want in expected.items():
        body = {"model_name": name, "text": texts, **({"task": task} if task else {})}
        assert_same_tokens(token_vectors(http.post("/infer", json=body)), want, f"{name}, task {task}")
    # One text alone embeds as the library embeds it (a text of its own: not from the cache).
    lone = f"{DOCUMENTS[1]} alone"
    alone = http.post("/infer", json={"model_name": name, "text": [lone], "task": "document"})
    assert alone.headers["x-cached-inputs"] == "0"
    assert_same_tokens(token_vectors(alone), model.encode_document([lone], convert_to_numpy=True), f"{name}, alone")


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank"])
def test_rerank_is_the_librarys_maxsim_best_first(http, models, references, path):
    model = references[COLBERT]
    query = f"{QUERY} ({path})"  # a query of its own: its vectors computed, not the cache's
    expected = model.similarity(model.encode_query([query]), model.encode_document(DOCUMENTS)).cpu().numpy()[0]
    assert np.ptp(expected) > 0.1
    response = http.post(path, json={"model": COLBERT, "query": query, "documents": DOCUMENTS, "top_n": 3})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [hit["index"] for hit in results] == list(np.argsort(-expected, kind="stable")[:3])
    np.testing.assert_allclose([hit["relevance_score"] for hit in results], np.sort(expected)[::-1][:3], atol=1e-4)
    assert response.json()["usage"]["total_tokens"] > 0


def test_options_that_mean_nothing_to_token_vectors_are_refused(http, models):
    response = http.post("/infer", json={"model_name": COLBERT, "text": ["a"], "precision": "int8"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "wrong_model_kind"
    response = http.post("/v1/embeddings", json={"model": COLBERT, "input": ["a"]})
    assert response.status_code == 400 and "multi_vector_embeddings" in response.json()["error"]["message"]


def test_the_listing_says_how_it_scores(http, models):
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert listed[COLBERT]["kind"] == "multi_vector_encoder" and listed[COLBERT]["similarity"] == "maxsim"
    assert listed[COLBERT]["query_tokens"] == tiny_models.QUERY_EXPANSION
    assert listed[COLBERT]["prompts"] == {"query": "[Q] ", "document": "[D] "}


def test_a_bulk_job_of_rerank_lines_scores_by_maxsim_as_the_route(gateway, http, models, references):
    model = references[COLBERT]
    bodies = [{"model": COLBERT, "query": f"{QUERY} {i}", "documents": DOCUMENTS[i:], "top_n": 2} for i in range(3)]
    lines = [line(f"q{i}", body, "/v1/rerank") for i, body in enumerate(bodies)]
    batch, output, _ = run_batch(gateway, lines, "/v1/rerank")
    assert batch.status == "completed" and batch.request_counts.failed == 0
    for i, body in enumerate(bodies):
        # The model computed the job's scores: the library's MaxSim, best first.
        queries = model.encode_query([body["query"]])
        expected = model.similarity(queries, model.encode_document(body["documents"])).cpu().numpy()[0]
        results = output[f"q{i}"]["response"]["body"]["results"]
        assert [hit["index"] for hit in results] == list(np.argsort(-expected, kind="stable")[:2])
        np.testing.assert_allclose([hit["relevance_score"] for hit in results], np.sort(expected)[::-1][:2], atol=1e-4)
    assert_reranked_as_online(http, bodies, output)
