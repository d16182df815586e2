"""Models whose modules differ by task (a Router), served per route through the real gateway
and tritonserver: each route answers its own task's texts as ``encode_query`` /
``encode_document`` / ``encode`` compute them, never with another route's modules (nor
from another route's cache rows); a task the model has no route for is a 400 naming its
routes; an inference-free sparse model's queries are computed by the gateway alone."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests import tiny_models
from tests.helpers import cosine_rows, settled

from .conftest import models_loaded

DENSE = "org/tiny-routed"
SPARSE = "org/tiny-routed-splade"
FREE = "org/tiny-inference-free"
# Texts no other test sends (the response cache answers repeats).
TEXTS = ["which fox jumps over the dog", "the bank fell on monday", "a", " ".join(["query document search"] * 30)]


def _library(name: str, directory):
    import sentence_transformers

    return getattr(sentence_transformers, name)(str(directory), device="cpu")


@pytest.fixture(scope="module")
def models(gateway, tmp_path_factory):
    """A routed dense model whose default is its query route (so that a document task the
    gateway did not read would get the query head), a routed SPLADE model with no default
    route (a text must name its task) and an inference-free one, loaded through the API;
    deleted afterwards (others count models)."""
    root = tmp_path_factory.mktemp("routes")
    directories = {
        DENSE: tiny_models.routed_model(root / "dense", default_route="query"),
        SPARSE: tiny_models.routed_sparse_model(root / "splade", default_route=None),
        FREE: tiny_models.inference_free_splade(root / "free", max_active_dims=30),
    }
    with models_loaded(gateway, directories):
        yield directories


@pytest.fixture(scope="module")
def references(models):
    return {
        DENSE: _library("SentenceTransformer", models[DENSE]),
        SPARSE: _library("SparseEncoder", models[SPARSE]),
        FREE: _library("SparseEncoder", models[FREE]),
    }


def dense_rows(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    body = response.json()
    rows = body["text_embeddings"] if "text_embeddings" in body else [d["embedding"] for d in body["data"]]
    return np.asarray(rows, dtype=np.float64)


def assert_sparse(response, expected: np.ndarray) -> None:
    assert response.status_code == 200, response.text
    rows = response.json()["sparse_embeddings"]
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        assert row["indices"] == np.flatnonzero(want).tolist()
        np.testing.assert_allclose(row["values"], want[row["indices"]], rtol=1e-4, atol=1e-4)


def test_each_dense_route_is_its_tasks_encode(http, models, references):
    model = references[DENSE]
    query, document = model.encode_query(TEXTS), model.encode_document(TEXTS)
    assert cosine_rows(query, document).max() < 0.9, "the heads must differ for the test to mean anything"
    assert np.ptp(cosine_rows(document, np.roll(document, 1, axis=0))) > 0.01, "texts must embed apart"
    asked = {
        "task query": (http.post("/infer", json={"model_name": DENSE, "text": TEXTS, "task": "query"}), query),
        "prompt_name query": (http.post("/infer", json={"model_name": DENSE, "text": TEXTS[:2], "prompt_name": "query"}), query[:2]),
        "no task": (http.post("/infer", json={"model_name": DENSE, "text": TEXTS}), model.encode(TEXTS)),
        "task document": (http.post("/infer", json={"model_name": DENSE, "text": TEXTS, "task": "document"}), document),
        "input_type query": (
            http.post("/v1/embeddings", json={"model": DENSE, "input": TEXTS, "input_type": "query"}), query
        ),
        "input_type passage": (
            http.post("/v1/embeddings", json={"model": DENSE, "input": TEXTS, "input_type": "passage"}), document
        ),
    }
    for what, (response, expected) in asked.items():
        assert cosine_rows(dense_rows(response), expected).min() >= 0.9999, what
    # The default is the query route: the document answers above came from the task read.
    assert cosine_rows(model.encode(TEXTS), query).min() >= 0.9999


def test_a_route_never_answers_from_another_routes_cache_rows(http, models, references):
    texts = ["a text asked of both routes in turn"]
    document = http.post("/infer", json={"model_name": DENSE, "text": texts, "task": "document"})
    query = http.post("/infer", json={"model_name": DENSE, "text": texts, "task": "query"})
    assert document.headers["x-cached-inputs"] == query.headers["x-cached-inputs"] == "0"
    assert cosine_rows(dense_rows(query), references[DENSE].encode_query(texts)).min() >= 0.9999
    again = http.post("/infer", json={"model_name": DENSE, "text": texts, "task": "query"})
    assert again.headers["x-cached-inputs"] == "1"
    np.testing.assert_allclose(dense_rows(again), dense_rows(query), atol=1e-6)


def test_each_sparse_route_is_its_tasks_encode(http, models, references):
    model = references[SPARSE]
    for task, encode in (("query", model.encode_query), ("document", model.encode_document)):
        expected = encode(TEXTS, convert_to_sparse_tensor=False).float().numpy()
        assert_sparse(http.post("/infer", json={"model_name": SPARSE, "text": TEXTS, "task": task}), expected)


def test_a_task_the_model_has_no_route_for_is_a_400_naming_its_routes(http, models):
    response = http.post("/infer", json={"model_name": SPARSE, "text": ["a"]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "unknown_route"
    assert "'query' (task 'query')" in error["message"] and "'document' (task 'document')" in error["message"]


def test_inference_free_queries_are_computed_by_the_gateway_and_documents_by_triton(gateway, http, models, references):
    model = references[FREE]

    def inferences() -> int:
        stats = httpx.get(f"{gateway.url}/metrics", timeout=30).json()["model_stats"]
        return sum(entry["inference_count"] for entry in stats if entry["name"] == FREE)

    before = inferences()
    queries = ["what fox is quick", "the movie about food", "awesome stocks"]
    expected = model.encode_query(queries, convert_to_sparse_tensor=False).float().numpy()
    assert (expected != 0).sum(axis=1).min() > 1
    assert_sparse(http.post("/infer", json={"model_name": FREE, "text": queries, "task": "query"}), expected)
    # Its own max_active_dims (30) applies to queries too, as encode_query applies it.
    top = model.encode_query(queries, max_active_dims=2, convert_to_sparse_tensor=False).float().numpy()
    assert_sparse(http.post("/infer", json={"model_name": FREE, "text": queries, "task": "query", "top_k": 2}), top)
    assert settled(inferences) == before, "a query of an inference-free model ran in Triton"
    documents = ["the quick brown fox jumps over the lazy dog", "hello world"]
    expected = model.encode_document(documents, convert_to_sparse_tensor=False).float().numpy()
    assert_sparse(http.post("/infer", json={"model_name": FREE, "text": documents}), expected)
    # Its documents, and only they, ran in Triton: one inference each.
    assert settled(inferences) == before + len(documents)


def test_the_listing_shows_the_routes_and_where_they_run(http, models):
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert listed[FREE]["routes"] == [
        {"name": "document", "tasks": ["default", "document"], "runs_on": "triton"},
        {"name": "query", "tasks": ["query"], "runs_on": "gateway"},
    ]
    assert [route["tasks"] for route in listed[SPARSE]["routes"]] == [["query"], ["document"]]
    assert listed[DENSE]["kind"] == "sentence_transformer" and len(listed[DENSE]["routes"]) == 2
