"""TEI's API over the fake gateway: each route's request and answer in TEI's shapes, the
base URL of a model (/tei/<model>) and of the default one (/tei), what a POST to a base URL
is, TEI's error shape and statuses, and the native routes of the same names untouched."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embedgate.api.compute.requests.results import Embeddings
from embedgate.api.errors import DeadlineExceeded, Overloaded, TritonError
from embedgate.api.settings import Settings

from .test_predict import CLASSIFIER

BASE = "/tei/org/loaded"
SPARSE = {"kind": "sparse_encoder", "sparse": {"max_active_dims": None, "pooling": "max", "activation": "relu"}}
MULTI_VECTOR = {
    "kind": "multi_vector_encoder", "normalized": True,
    "multi_vector": {"similarity": "maxsim", "query": {"max_length": 8}, "document": {"max_length": 16},
                     "default": {"max_length": 16}},
}
RERANKER = {
    "kind": "cross_encoder", "embedding_dim": 1,
    "cross_encoder": {"num_labels": 1, "activation": "torch.nn.modules.linear.Identity", "token_type_ids": False,
                      "logits": True},
}


def assert_tei_error(response, status: int, error_type: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type
    assert isinstance(body["error"], str) and body["error"]
    return body["error"]


def as_kind(gateway, changes: dict, name: str = "org/loaded"):
    gateway.registry.changes[name] = changes


# --- /embed


def test_embed_answers_a_list_of_vectors_with_the_timing_headers(client, gateway):
    response = client.post(f"{BASE}/embed", json={"inputs": ["a b", "c"]})
    assert response.status_code == 200, response.text
    assert response.json() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert gateway.embeddings.calls == [("org/loaded", ["a b", "c"], True)]
    headers = response.headers
    assert headers["x-compute-tokens"] == "4" and headers["x-compute-characters"] == "4"
    assert {"x-total-time", "x-tokenization-time", "x-queue-time", "x-inference-time", "x-compute-time"} <= set(headers)
    assert headers["x-inference-time-ms"] == "0.20" and headers["x-truncated-inputs"] == "0"
    # A single text is a batch of one, as TEI answers it.
    assert client.post(f"{BASE}/embed", json={"inputs": "one"}).json() == [[0.0, 1.0, 2.0]]


def test_dimensions_keep_the_first_ones_then_normalize(client, gateway):
    shortened = client.post(f"{BASE}/embed", json={"inputs": ["a", "b"], "dimensions": 2}).json()
    np.testing.assert_allclose(shortened, [[0, 1], [3 / 5, 4 / 5]], atol=1e-6)
    raw = client.post(f"{BASE}/embed", json={"inputs": ["a", "b"], "dimensions": 2, "normalize": False})
    assert raw.json() == [[0.0, 1.0], [3.0, 4.0]]
    assert gateway.embeddings.calls[-1] == ("org/loaded", ["a", "b"], False)
    assert "at most 3" in assert_tei_error(
        client.post(f"{BASE}/embed", json={"inputs": "a", "dimensions": 4}), 422, "Validation"
    )
    assert_tei_error(client.post(f"{BASE}/embed", json={"inputs": "a", "dimensions": 0}), 422, "Validation")


def test_huggingface_hubs_extra_field_and_prompt_name(client, gateway):
    gateway.registry.changes["org/loaded"] = {"prompts": {"query": "query: "}}
    body = {"inputs": ["a"], "encoding_format": "float", "prompt_name": "query", "truncation_direction": "right"}
    assert client.post(f"{BASE}/embed", json=body).status_code == 200
    assert gateway.embeddings.calls == [("org/loaded", ["query: a"], True)]
    assert_tei_error(client.post(f"{BASE}/embed", json={"inputs": "a", "encoding_format": "base64"}), 422, "Validation")
    assert "prompt" in assert_tei_error(
        client.post(f"{BASE}/embed", json={"inputs": "a", "prompt_name": "passage"}), 422, "Validation"
    )


@pytest.mark.parametrize(
    "body, status, error_type",
    [
        ({"inputs": []}, 400, "Empty"),
        ({"inputs": ["a", ""]}, 400, "Empty"),
        ({"inputs": ""}, 400, "Empty"),
        ({"inputs": [101, 2023]}, 422, "Validation"),  # token ids: this server tokenizes texts itself
        ({"inputs": "a", "normalise": True}, 422, "Validation"),  # a misspelt option is refused, never ignored
        ({"inputs": "a", "truncation_direction": "middle"}, 422, "Validation"),
        ({"inputs": ["a"] * 5}, 422, "Validation"),  # more than max_texts_per_request (4 here): TEI 1.9's 422
        ({}, 422, "Validation"),
    ],
)
def test_bad_embed_requests_get_teis_errors(client, body, status, error_type):
    assert_tei_error(client.post(f"{BASE}/embed", json=body), status, error_type)


def test_malformed_json_wrong_content_type_method_and_body_size(client, settings):
    assert_tei_error(client.post(f"{BASE}/embed", content=b"{", headers={"content-type": "application/json"}), 400,
                     "Validation")
    assert_tei_error(client.post(f"{BASE}/embed", content=b"{}", headers={"content-type": "text/plain"}), 415,
                     "Validation")
    assert_tei_error(client.get("/tei/embed"), 405, "Validation")
    big = b'{"inputs": "' + b"a" * settings.max_request_bytes + b'"}'
    assert_tei_error(client.post(f"{BASE}/embed", content=big, headers={"content-type": "application/json"}), 413,
                     "Validation")


def test_a_cut_input_is_refused_where_the_request_forbids_cutting(client, gateway):
    async def one_cut(model, ask, plan, *, timeout_s):
        return Embeddings(np.ones((len(ask.inputs), 3), dtype=np.float32), [16] * len(ask.inputs), 1, 0.1, 0.2)

    gateway.embeddings.answer = one_cut
    assert client.post(f"{BASE}/embed", json={"inputs": ["long", "short"]}).status_code == 200
    assert "truncate is false" in assert_tei_error(
        client.post(f"{BASE}/embed", json={"inputs": ["long", "short"], "truncate": False}), 422, "Validation"
    )
    assert "cuts the end" in assert_tei_error(
        client.post(f"{BASE}/embed", json={"inputs": "long", "truncation_direction": "Left"}), 422, "Validation"
    )


# --- the other kinds' routes, and what a model's kind refuses


def test_embed_sparse_answers_index_value_pairs(client, gateway):
    as_kind(gateway, SPARSE)
    response = client.post(f"{BASE}/embed_sparse", json={"inputs": ["a", "b"]})
    assert response.status_code == 200, response.text
    # The fake's rows [0, 1, 2] and [3, 4, 5]: the zero is not a weight.
    assert response.json() == [
        [{"index": 1, "value": 1.0}, {"index": 2, "value": 2.0}],
        [{"index": 0, "value": 3.0}, {"index": 1, "value": 4.0}, {"index": 2, "value": 5.0}],
    ]
    message = assert_tei_error(client.post(f"{BASE}/embed", json={"inputs": "a"}), 424, "Backend")
    assert "/embed_sparse" in message and "/infer" not in message


def test_embed_all_answers_a_multi_vector_models_token_vectors(client, gateway):
    as_kind(gateway, MULTI_VECTOR)
    response = client.post(f"{BASE}/embed_all", json={"inputs": "a"})
    assert response.status_code == 200, response.text
    assert response.json() == [[[0, 1, 2], [0.5, 1.5, 2.5]]]
    # A dense model gives no token vectors: refused, never answered with something else.
    as_kind(gateway, {})
    assert "/embed and /similarity" in assert_tei_error(
        client.post(f"{BASE}/embed_all", json={"inputs": "a"}), 424, "Backend"
    )


def test_similarity_is_the_cosine_with_the_source_sentence(client, gateway):
    as_kind(gateway, {"normalized": False})
    body = {"inputs": {"source_sentence": "s", "sentences": ["a", "b"]}, "parameters": {"truncate": True}}
    response = client.post(f"{BASE}/similarity", json=body)
    assert response.status_code == 200, response.text
    rows = np.arange(9, dtype=np.float64).reshape(3, 3)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    np.testing.assert_allclose(response.json(), rows[1:] @ rows[0], atol=1e-6)
    assert gateway.embeddings.calls == [("org/loaded", ["s", "a", "b"], True)]
    empty = {"inputs": {"source_sentence": "s", "sentences": []}}
    assert "inputs.sentences" in assert_tei_error(client.post(f"{BASE}/similarity", json=empty), 400, "Empty")


def test_rerank_answers_ranks_best_first(client, gateway):
    as_kind(gateway, RERANKER)
    body = {"query": "q", "texts": ["bb", "a", "ccc"], "return_text": True, "raw_scores": True}
    response = client.post(f"{BASE}/rerank", json=body)
    assert response.status_code == 200, response.text
    # The fake's score is a text's length.
    assert response.json() == [
        {"index": 2, "score": 3.0, "text": "ccc"}, {"index": 0, "score": 2.0, "text": "bb"},
        {"index": 1, "score": 1.0, "text": "a"},
    ]
    assert set(client.post(f"{BASE}/rerank", json={"query": "q", "texts": ["a"]}).json()[0]) == {"index", "score"}
    assert_tei_error(client.post(f"{BASE}/rerank", json={"query": "q", "texts": []}), 400, "Empty")
    as_kind(gateway, {})
    refused = client.post(f"{BASE}/rerank", json={"query": "q", "texts": ["a"]})
    assert "/embed" in assert_tei_error(refused, 424, "Backend")


def test_predict_in_teis_shape_and_a_classifier_reranks_nothing(client, gateway):
    as_kind(gateway, CLASSIFIER)
    one = client.post(f"{BASE}/predict", json={"inputs": "a text", "parameters": {}})
    assert one.status_code == 200, one.text
    assert [p["label"] for p in one.json()] == ["neutral", "entailment", "contradiction"]
    batch = client.post(f"{BASE}/predict", json={"inputs": [["a"], ["b", "c"]], "raw_scores": True})
    assert [[p["score"] for p in row] for row in batch.json()] == [[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]]
    top_k = {"inputs": "a", "parameters": {"top_k": 1}}  # text_classification's option, not TEI's
    assert_tei_error(client.post(f"{BASE}/predict", json=top_k), 422, "Validation")
    assert_tei_error(client.post(f"{BASE}/predict", json={"inputs": ""}), 400, "Empty")
    refused = client.post(f"{BASE}/rerank", json={"query": "q", "texts": ["a"]})
    assert "/predict" in assert_tei_error(refused, 424, "Backend")


# --- a POST to a base URL


@pytest.mark.parametrize(
    "changes, body, expected",
    [
        ({}, {"inputs": "a"}, [[0.0, 1.0, 2.0]]),
        ({}, {"inputs": {"source_sentence": "a", "sentences": ["a"]}}, None),
        (SPARSE, {"inputs": "a"}, [[{"index": 1, "value": 1.0}, {"index": 2, "value": 2.0}]]),
        (MULTI_VECTOR, {"inputs": "a"}, [[[0, 1, 2], [0.5, 1.5, 2.5]]]),
        # TEI's score: the logit's sigmoid (the fake reranker's logit is the document's length).
        (RERANKER, {"query": "q", "texts": ["aa"]}, [{"index": 0, "score": pytest.approx(1 / (1 + math.exp(-2.0)))}]),
        (CLASSIFIER, {"inputs": "a", "parameters": {}}, None),
    ],
)
def test_a_post_to_a_base_url_is_the_route_of_the_models_kind(client, gateway, changes, body, expected):
    as_kind(gateway, changes)
    for url in (BASE, "/tei"):
        response = client.post(url, json=body)
        assert response.status_code == 200, response.text
        if expected is not None:
            assert response.json() == expected
    assert response.headers["x-compute-tokens"]


def test_a_base_url_takes_a_body_of_another_route_and_answers_as_that_route(client, gateway):
    # Every body the document allows at a base URL is taken: a rerank's, to an embedding
    # model, is its /rerank, which the model's kind does not answer (TEI's 424).
    refused = client.post(BASE, json={"query": "q", "texts": ["a"]})
    assert "/embed" in assert_tei_error(refused, 424, "Backend")
    assert_tei_error(client.post(BASE, json={"inputs": "a", "raw_scores": True}), 424, "Backend")
    assert_tei_error(client.post(BASE, json={"inputs": 7}), 422, "Validation")
    assert_tei_error(client.post(BASE, content=b"[", headers={"content-type": "application/json"}), 400, "Validation")
    # A path that ends in the name of a GET route is that route: no model's base URL.
    for path in ("/tei/org/info", "/tei/info", "/tei/org/loaded/health", "/tei/health"):
        response = client.post(path, json={"inputs": "a"})
        assert_tei_error(response, 405, "Validation")
        assert response.headers["allow"] == "GET"
    assert client.options("/tei/info").headers["allow"] == "GET"


# --- which model: the default model, a named one


def test_the_default_model_is_the_only_loaded_one_or_the_setting(client, gateway, settings):
    assert client.post("/tei/embed", json={"inputs": "a"}).status_code == 200
    gateway.registry.loaded_names.add("org/other")
    gateway.registry.on_disk_names.add("org/other")
    message = assert_tei_error(client.post("/tei/embed", json={"inputs": "a"}), 404, "Validation")
    assert "2 models are loaded (org/loaded, org/other)" in message and "/tei/<model>" in message
    assert client.post("/tei/org/other/embed", json={"inputs": "a"}).status_code == 200
    settings.tei_model = "org/other"
    assert client.post("/tei/embed", json={"inputs": "a"}).status_code == 200
    assert gateway.embeddings.calls[-1][0] == "org/other"


def test_unknown_unloaded_and_invalid_models(client):
    assert_tei_error(client.post("/tei/org/nothing/embed", json={"inputs": "a"}), 404, "Validation")
    assert_tei_error(client.post("/tei/org/on-disk/embed", json={"inputs": "a"}), 409, "Validation")
    assert_tei_error(client.post("/tei/a/b/c/embed", json={"inputs": "a"}), 422, "Validation")
    assert_tei_error(client.get("/tei/org/nothing/info"), 404, "Validation")


# --- errors from below: TEI's statuses


@pytest.mark.parametrize(
    "error, status, error_type",
    [
        (Overloaded("too many requests in flight", retry_after_s=1), 429, "Overloaded"),
        (TritonError("the model failed"), 424, "Backend"),
        (DeadlineExceeded("past its deadline"), 504, "Backend"),
    ],
)
def test_errors_below_take_teis_status(client, gateway, error, status, error_type):
    async def failing(model, ask, plan, *, timeout_s):
        raise error

    gateway.embeddings.answer = failing
    response = client.post(f"{BASE}/embed", json={"inputs": "a"})
    assert_tei_error(response, status, error_type)
    if status == 429:
        assert response.headers["retry-after"] == "1"


def test_keys_guard_the_routes_but_health(gateway):
    from fastapi.testclient import TestClient

    from embedgate.api.http.app import create_app

    app = create_app(Settings(api_keys=["secret"]))
    app.state.gateway = gateway
    with TestClient(app, raise_server_exceptions=False) as keyed:
        keyed.app.state.gateway = gateway
        assert_tei_error(keyed.post(f"{BASE}/embed", json={"inputs": "a"}), 401, "Validation")
        ok = keyed.post(f"{BASE}/embed", json={"inputs": "a"}, headers={"authorization": "Bearer secret"})
        assert ok.status_code == 200
        assert keyed.get(f"{BASE}/health").status_code == 200


# --- tokenize, decode, info, health


def test_tokenize_and_decode(client, gateway):
    response = client.post(f"{BASE}/tokenize", json={"inputs": "héllo world", "prompt_name": None})
    assert response.status_code == 200, response.text
    assert response.json() == [[
        {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None},
        {"id": 5, "text": "héllo", "special": False, "start": 0, "stop": 6},
        {"id": 5, "text": "world", "special": False, "start": 7, "stop": 12},
    ]]
    plain = client.post(f"{BASE}/tokenize", json={"inputs": ["a", "b c"], "add_special_tokens": False}).json()
    assert [[token["text"] for token in row] for row in plain] == [["a"], ["b", "c"]]
    assert client.post(f"{BASE}/decode", json={"ids": [101, 7, 8]}).json() == ["7 8"]
    batch = client.post(f"{BASE}/decode", json={"ids": [[101, 7], [9]], "skip_special_tokens": False})
    assert batch.json() == ["101 7", "9"]
    assert_tei_error(client.post(f"{BASE}/decode", json={"ids": []}), 400, "Empty")
    assert_tei_error(client.post(f"{BASE}/decode", json={"ids": [[1], []]}), 400, "Empty")
    assert_tei_error(client.post(f"{BASE}/decode", json={"ids": [-1]}), 422, "Validation")
    assert_tei_error(client.post(f"{BASE}/tokenize", json={"inputs": []}), 400, "Empty")


def test_info_describes_the_model_as_tei_does(client, gateway, settings):
    info = client.get(f"{BASE}/info").json()
    assert info["model_id"] == info["served_model_name"] == "org/loaded"
    assert info["model_type"] == {"embedding": {"pooling": "model"}}
    assert info["max_client_batch_size"] == settings.max_texts_per_request and info["auto_truncate"] is True
    assert info["max_input_length"] == 16 and info["model_dtype"] == "float32"
    as_kind(gateway, CLASSIFIER)
    labels = ["contradiction", "entailment", "neutral"]
    assert client.get("/tei/info").json()["model_type"] == {"classifier": {
        "id2label": {"0": labels[0], "1": labels[1], "2": labels[2]},
        "label2id": {label: i for i, label in enumerate(labels)},
    }}
    as_kind(gateway, RERANKER)
    assert set(client.get(f"{BASE}/info").json()["model_type"]) == {"reranker"}
    as_kind(gateway, SPARSE)
    assert client.get(f"{BASE}/info").json()["model_type"] == {"embedding": {"pooling": "splade"}}


def test_health_is_teis_and_the_native_routes_keep_their_shapes(client, gateway):
    healthy = client.get(f"{BASE}/health")
    assert healthy.status_code == 200 and healthy.content == b""
    assert client.get("/tei/health").status_code == 200
    gateway.ready = False
    assert_tei_error(client.get(f"{BASE}/health"), 503, "Unhealthy")
    assert_tei_error(client.get("/tei/org/nothing/health"), 404, "Validation")
    # /health, /rerank and /predict at the root are the native API's.
    assert client.get("/health").json() == {"status": "live"}
    native = client.post("/rerank", json={"query": "q", "texts": ["a"]})
    assert native.status_code == 422 and native.json()["error"]["code"] == "invalid_request"
    assert client.post("/embed", json={"inputs": "a"}).json()["error"]["code"] == "not_found"
