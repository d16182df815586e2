"""Keys as tenants on the inference routes (fake gateway behind the real app): per-key
limits answered with 429, Retry-After and OpenAI's rate-limit headers; each key's
requests, inputs and refusals counted under its name or short hash, never the key; every
inference route charged to the key."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from embedgate.api.compute.scheduling.rates import KeyRates
from embedgate.api.http.app import create_app
from embedgate.api.settings import Settings
from embedgate.api.telemetry.metrics import REGISTRY
from tests.api.conftest import FakeGateway

EMBED = {"model": "org/loaded", "input": ["one", "two"]}


@pytest.fixture
def keyed(request):
    # Keys of their own per test: the counters are the process's.
    keys = {who: f"{request.node.name}-{who}" for who in ("named", "plain")}
    settings = Settings(api_keys=list(keys.values()), key_names=[f"{request.node.name[:40]}={keys['named']}"],
                        max_texts_per_request=4)
    app = create_app(settings)
    gateway = FakeGateway(settings)
    app.state.gateway = gateway
    client = TestClient(app, raise_server_exceptions=False)
    headers = {who: {"authorization": f"Bearer {key}"} for who, key in keys.items()}
    return client, gateway, headers, request.node.name[:40], app.state.keyring.tenants[1].label


def samples(name: str) -> dict[tuple, float]:
    text = generate_latest(REGISTRY).decode()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_past_its_limit_a_key_gets_429_with_retry_after_and_openais_headers(keyed):
    client, gateway, headers, _, _ = keyed
    gateway.embeddings.rates = KeyRates(2, 0)
    first = client.post("/v1/embeddings", json=EMBED, headers=headers["named"])
    assert first.status_code == 200
    assert first.headers["x-ratelimit-limit-requests"] == "2" and first.headers["x-ratelimit-remaining-requests"] == "1"
    assert first.headers["x-ratelimit-reset-requests"].endswith("s")
    infer = {"model_name": "org/loaded", "text": ["x"]}
    assert client.post("/infer", json=infer, headers=headers["named"]).status_code == 200
    refused = client.post("/v1/embeddings", json=EMBED, headers=headers["named"])
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and "2 requests per minute" in error["message"]
    native = client.post("/infer", json={"model_name": "org/loaded", "text": ["x"]}, headers=headers["named"])
    assert native.status_code == 429 and native.json()["error"]["code"] == "rate_limited"
    # The other key has its own allowance.
    assert client.post("/v1/embeddings", json=EMBED, headers=headers["plain"]).status_code == 200


def test_tokens_per_minute_count_the_inputs_estimated_tokens(keyed):
    client, gateway, headers, _, _ = keyed
    gateway.embeddings.rates = KeyRates(0, 20)
    answer = client.post("/v1/embeddings", json={"model": "org/loaded", "input": ["a" * 40]}, headers=headers["plain"])
    assert answer.status_code == 200 and answer.headers["x-ratelimit-remaining-tokens"] == "8"  # 40/4 + 2
    assert "x-ratelimit-limit-requests" not in answer.headers
    over = client.post("/v1/embeddings", json={"model": "org/loaded", "input": ["a" * 40]}, headers=headers["plain"])
    assert over.status_code == 429 and over.headers["x-ratelimit-limit-tokens"] == "20"


def test_without_limits_answers_carry_no_rate_limit_headers(keyed):
    client, _, headers, _, _ = keyed
    answer = client.post("/v1/embeddings", json=EMBED, headers=headers["named"])
    assert answer.status_code == 200 and not any(h.startswith("x-ratelimit") for h in answer.headers)


def test_each_keys_requests_inputs_and_refusals_are_counted_by_its_label(keyed):
    client, gateway, headers, name, short = keyed
    gateway.embeddings.rates = KeyRates(2, 0)
    for _ in range(3):
        client.post("/v1/embeddings", json=EMBED, headers=headers["named"])
    client.post("/infer", json={"model_name": "org/loaded", "text": ["x", "y", "z"]}, headers=headers["plain"])
    client.post("/infer", json={"model_name": "org/loaded", "text": ["x"]}, headers={"authorization": "Bearer nope"})
    requests = samples("embedgate_key_requests_total")
    assert requests[(("key", name), ("status", "200"))] == 2
    assert requests[(("key", name), ("status", "429"))] == 1
    assert requests[(("key", short), ("status", "200"))] == 1
    assert short.startswith("key-") and len(short) == 12
    inputs = samples("embedgate_key_inputs_total")
    assert inputs[(("key", name),)] == 4 and inputs[(("key", short),)] == 3  # answered requests' inputs only
    assert samples("embedgate_key_rejections_total")[(("key", name), ("reason", "rate_limited"))] == 1
    # Only configured keys are labels; the keys themselves appear nowhere.
    text = generate_latest(REGISTRY).decode()
    assert "nope" not in text and client.app.state.keyring.tenants[0].owner not in text
    assert not any(label.endswith(("-named", "-plain")) for labels in requests for _, label in labels)


# Every inference route's answer is charged to the key (docs/limits.md, per-key limits):
# with one request a minute, the key's second request on the route is refused.
IMAGE = [("image", ("a.png", b"an image", "image/png"))]
LIMITED_ROUTES = {
    "/infer": ("org/loaded", {"json": {"model_name": "org/loaded", "text": ["x"]}}),
    "/v1/embeddings": ("org/loaded", {"json": EMBED}),
    "/infer_image": ("org/mm", {"data": {"model_name": "org/mm"}, "files": IMAGE}),
    "/rerank": ("org/reranker", {"json": {"model": "org/reranker", "query": "q", "documents": ["a", "b"]}}),
    "/v1/rerank": ("org/reranker", {"json": {"model": "org/reranker", "query": "q", "documents": ["a"]}}),
    "/predict": ("org/classifier", {"json": {"model": "org/classifier", "inputs": "a text"}}),
    "/v2/embed": ("org/mm", {"json": {"model": "org/mm", "input_type": "search_document", "texts": ["a"]}}),
    "/v2/rerank": ("org/reranker", {"json": {"model": "org/reranker", "query": "q", "documents": ["a"]}}),
    "/tei/org/loaded/embed": ("org/loaded", {"json": {"inputs": "a"}}),
    "/tei/org/reranker/rerank": ("org/reranker", {"json": {"query": "q", "texts": ["a"]}}),
    "/tei/org/classifier/predict": ("org/classifier", {"json": {"inputs": "a text"}}),
    "/tei/org/loaded": ("org/loaded", {"json": {"inputs": "a"}}),
}


@pytest.mark.parametrize("path", list(LIMITED_ROUTES))
def test_every_inference_route_is_charged_to_the_key(keyed, path):
    from .test_cohere_routes import MULTIMODAL
    from .test_predict import CLASSIFIER
    from .test_tei import RERANKER

    client, gateway, headers, _, _ = keyed
    kinds = {"org/mm": MULTIMODAL, "org/reranker": RERANKER, "org/classifier": CLASSIFIER}
    model, request = LIMITED_ROUTES[path]
    gateway.registry.loaded_names.add(model)
    if model in kinds:
        gateway.registry.changes[model] = kinds[model]
    gateway.embeddings.rates = KeyRates(1, 0)
    first = client.post(path, headers=headers["named"], **request)
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-remaining-requests"] == "0"
    refused = client.post(path, headers=headers["named"], **request)
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["retry-after"]) >= 1
    # The other key is not charged for it.
    assert client.post(path, headers=headers["plain"], **request).status_code == 200
