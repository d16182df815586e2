"""Every sentence-transformers model class, served as its library computes it, through the
real gateway and tritonserver: a CrossEncoder reranks (scores equal to ``CrossEncoder.predict``),
a SPLADE SparseEncoder gives sparse vectors (the same non-zero weights as
``SparseEncoder.encode``), and each kind refuses the requests of the others, saying where
to go.

The response cache is on here: every test that compares an answer with the library sends
a query or texts of its own and checks that none was answered from the cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import tiny_models

from .conftest import assert_reranked_as_online, models_loaded, run_batch
from .test_batches import line

CROSS = "org/tiny-reranker"
LEGACY = "org/tiny-legacy-reranker"
SPARSE = "org/tiny-splade"
QUERY = "what is the quick brown fox"
DOCUMENTS = [
    "the quick brown fox jumps over the lazy dog",
    "stocks fell at the bank",
    "a man is eating food",
    # Past the model's 64 tokens with the query: cut longest first, as the model cuts it.
    " ".join(["the lazy dog is over the brown fox"] * 20),
    "hello",
]
TEXTS = ["the quick brown fox", "hello world", "a man is eating food", " ".join(["stocks fell"] * 60), "a"]
PROMPTS = {"query": "query: "}


def computed(response):
    """``response``, checked to be a 200 the model computed (no input from the cache)."""
    assert response.status_code == 200, response.text
    assert response.headers["x-cached-inputs"] == "0", "answered from the response cache"
    return response


def _library(name):
    import sentence_transformers

    return getattr(sentence_transformers, name)


@pytest.fixture(scope="module")
def models(gateway, tmp_path_factory):
    """A tiny reranker (with a prompt) and a tiny SPLADE model (with a default top-k of its
    own), loaded through the API; deleted afterwards (other tests count the models)."""
    root = tmp_path_factory.mktemp("kinds")
    directories = {
        CROSS: tiny_models.cross_encoder(root / "reranker", prompts=PROMPTS),
        # Saved before config_sentence_transformers.json: a plain sequence classifier.
        LEGACY: tiny_models.legacy_cross_encoder(root / "legacy", seed=3),
        SPARSE: tiny_models.sparse_encoder(root / "splade", max_active_dims=20),
    }
    with models_loaded(gateway, directories) as answers:
        yield directories, answers


@pytest.fixture(scope="module")
def reranker(models):
    return _library("CrossEncoder")(str(models[0][CROSS]), device="cpu")


@pytest.fixture(scope="module")
def splade(models):
    return _library("SparseEncoder")(str(models[0][SPARSE]), device="cpu")


def test_the_load_answer_and_the_listings_say_the_kind(http, models, splade):
    _, answers = models
    assert answers[CROSS]["kind"] == "cross_encoder" and answers[CROSS]["embedding_dim"] == 1
    assert answers[SPARSE]["kind"] == "sparse_encoder"
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert listed[CROSS]["kind"] == "cross_encoder" and listed[CROSS]["num_labels"] == 1
    assert listed[CROSS]["activation"] == "torch.nn.modules.activation.Sigmoid"
    assert listed[CROSS]["prompts"] == PROMPTS
    # The top-k the library reads back from the saved model: 20 (sentence-transformers 6.0
    # saved none, so its models load without one and encode keeps every non-zero weight).
    assert listed[SPARSE]["kind"] == "sparse_encoder" and listed[SPARSE]["max_active_dims"] == splade.max_active_dims


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank"])
def test_rerank_scores_are_predicts_best_first(http, models, reranker, path):
    query = f"{QUERY} ({path})"
    response = computed(http.post(path, json={"model": CROSS, "query": query, "documents": DOCUMENTS}))
    body = response.json()
    expected = reranker.predict([[query, document] for document in DOCUMENTS])
    assert np.ptp(expected) > 0.1  # scores far enough apart for the tolerance to mean something
    scores = {result["index"]: result["relevance_score"] for result in body["results"]}
    assert sorted(scores) == list(range(len(DOCUMENTS)))
    np.testing.assert_allclose([scores[i] for i in range(len(DOCUMENTS))], expected, atol=1e-4)
    assert [result["index"] for result in body["results"]] == list(np.argsort(-expected, kind="stable"))
    assert "document" not in body["results"][0]
    assert body["usage"]["total_tokens"] > 0 and int(response.headers["x-truncated-inputs"]) == 1


def test_a_cross_encoder_saved_without_its_settings_file_scores_as_predict(http, models):
    assert not (models[0][LEGACY] / "config_sentence_transformers.json").exists()
    legacy = _library("CrossEncoder")(str(models[0][LEGACY]), device="cpu")
    query = f"{QUERY}, an older reranker"
    response = computed(http.post("/rerank", json={"model": LEGACY, "query": query, "documents": DOCUMENTS}))
    expected = legacy.predict([[query, document] for document in DOCUMENTS])
    assert np.ptp(expected) > 0.1
    scores = sorted((hit["index"], hit["relevance_score"]) for hit in response.json()["results"])
    np.testing.assert_allclose([score for _, score in scores], expected, atol=1e-4)


def test_top_n_documents_as_objects_and_the_documents_returned(http, models, reranker):
    objects = [{"text": document} for document in DOCUMENTS]
    query = f"{QUERY}, the best two"
    response = computed(http.post(
        "/rerank", json={"model": CROSS, "query": query, "documents": objects, "top_n": 2, "return_documents": True}
    ))
    ranked = [(hit["index"], hit["document"]["text"]) for hit in response.json()["results"]]
    expected = reranker.rank(query, DOCUMENTS, top_k=2, return_documents=True)
    assert ranked == [(hit["corpus_id"], hit["text"]) for hit in expected]


def test_a_prompt_goes_before_the_query_as_predict_puts_it(http, models, reranker):
    query = f"{QUERY}, with a prompt"
    body = {"model": CROSS, "query": query, "documents": DOCUMENTS, "prompt_name": "query"}
    response = computed(http.post("/rerank", json=body))
    scores = sorted((hit["index"], hit["relevance_score"]) for hit in response.json()["results"])
    expected = reranker.predict([[query, document] for document in DOCUMENTS], prompt_name="query")
    np.testing.assert_allclose([score for _, score in scores], expected, atol=1e-4)
    unprompted = reranker.predict([[query, document] for document in DOCUMENTS])
    assert np.abs(expected - unprompted).max() > 0.01  # the prompt changed the scores


def test_sparse_embeddings_have_encodes_non_zero_weights(http, models, splade):
    # The model's own max_active_dims (20, as the library loads it) applies, as encode applies it.
    steps = ((splade.max_active_dims, {}), (5, {"top_k": 5}), (None, {"top_k": 100_000}))
    for step, (top_k, request) in enumerate(steps):
        texts = [f"{text} {step}" if text != "a" else text * (step + 1) for text in TEXTS]
        response = computed(http.post("/infer", json={"model_name": SPARSE, "text": texts, **request}))
        rows = response.json()["sparse_embeddings"]
        expected = splade.encode(texts, max_active_dims=top_k or 100_000, convert_to_sparse_tensor=False).numpy()
        # The texts' weights differ from text to text (else a wrong row would pass).
        supports = {tuple(np.flatnonzero(want)) for want in expected}
        assert len(supports) == len(texts)
        assert len(rows) == len(texts)
        for row, want in zip(rows, expected):
            assert row["indices"] == np.flatnonzero(want).tolist()
            np.testing.assert_allclose(row["values"], want[row["indices"]], rtol=1e-4, atol=1e-5)
        if top_k:
            assert max(len(row["indices"]) for row in rows) == top_k


def test_each_kind_refuses_the_others_requests_saying_where_to_go(http, models):
    def refusal(response, pointer):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "wrong_model_kind", error
        assert pointer in error["message"], error["message"]

    refusal(http.post("/infer", json={"model_name": CROSS, "text": ["a"]}), "/rerank")
    refusal(http.post("/v1/embeddings", json={"model": CROSS, "input": ["a"]}), "/rerank")
    refusal(http.post("/v1/embeddings", json={"model": SPARSE, "input": ["a"]}), "/infer")
    refusal(http.post("/rerank", json={"model": SPARSE, "query": "a", "documents": ["b"]}), "/infer")
    bad = http.post("/infer", json={"model_name": SPARSE, "text": ["a"], "precision": "int8"})
    assert bad.status_code == 400 and "precision" in bad.json()["error"]["message"]


def test_the_models_keep_serving_everyone_else(http, models, reranker):
    # After every refusal above, a good request is answered as before.
    query = f"{QUERY}, after the refusals"
    response = computed(http.post("/v1/rerank", json={"model": CROSS, "query": query, "documents": DOCUMENTS[:2]}))
    expected = reranker.predict([[query, document] for document in DOCUMENTS[:2]])
    np.testing.assert_allclose(sorted(hit["relevance_score"] for hit in response.json()["results"]), sorted(expected), atol=1e-4)


def test_the_metadata_records_the_kind(gateway, models):
    for name, kind in ((CROSS, "cross_encoder"), (SPARSE, "sparse_encoder")):
        metadata = json.loads((gateway.repository / name.replace("/", "--") / "metadata.json").read_text())
        assert metadata["kind"] == kind and metadata["parity"]["passed"]


def test_a_bulk_job_of_rerank_lines_answers_as_the_route(gateway, http, models, reranker):
    bodies = [
        {"model": CROSS, "query": f"{QUERY} in bulk {i}", "documents": DOCUMENTS[i:] or DOCUMENTS, "top_n": 3}
        for i in range(4)
    ]
    lines = [line(f"q{i}", body, "/v1/rerank") for i, body in enumerate(bodies)]
    lines.append(line("wrong-kind", {"model": SPARSE, "query": "a", "documents": ["b"]}, "/v1/rerank"))
    batch, output, errors = run_batch(gateway, lines, "/v1/rerank")
    assert batch.status == "completed" and batch.request_counts.failed == 1
    assert errors[0]["response"]["body"]["error"]["code"] == "wrong_model_kind"
    for i, body in enumerate(bodies):
        answer = output[f"q{i}"]["response"]["body"]
        # The model computed the job's scores: predict's, best first.
        expected = reranker.predict([[body["query"], document] for document in body["documents"]])
        best = list(np.argsort(-expected, kind="stable")[:3])
        assert [r["index"] for r in answer["results"]] == best
        np.testing.assert_allclose([r["relevance_score"] for r in answer["results"]], expected[best], atol=1e-4)
    # The route answers the same bodies alike (from the rows the job left in the cache).
    assert_reranked_as_online(http, bodies, output)
