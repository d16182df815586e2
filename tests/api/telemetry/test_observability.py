"""GET /metrics/prometheus with fake gateway parts and a stand-in Triton metrics endpoint
served over real HTTP on 127.0.0.1; the output is read with prometheus_client's parser."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from embedgate.api.endpoints.envelope import served
from embedgate.api.errors import ConversionFailed, ModelNotFound, Overloaded
from embedgate.api.models.registry import ModelRegistry
from embedgate.api.settings import Settings
from embedgate.api.telemetry import tag_model
from embedgate.api.telemetry.metrics import REGISTRY, observe_conversion
from embedgate.api.telemetry.requests import RequestRecord, _current

# The shape of tritonserver's own metrics (what its metrics port serves).
TRITON_TEXT = b"""# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="org--loaded",version="1"} 7
# HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="org--loaded",version="1"} 2
"""


@pytest.fixture
def triton_metrics_url():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("content-type", "text/plain; charset=utf-8")
            self.end_headers()
            self.wfile.write(TRITON_TEXT)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


@pytest.fixture
def scrape(client, gateway, triton_metrics_url):
    gateway.triton = SimpleNamespace(metrics_url=triton_metrics_url, restarts=2)
    fake_served = gateway.registry.served

    def served(name, pretrained=None):  # as the real registry does (tested below)
        model = fake_served(name, pretrained)
        tag_model(model.name)
        return model

    gateway.registry.served = served

    def read() -> dict:
        response = client.get("/metrics/prometheus")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        return {family.name: family for family in text_string_to_metric_families(response.text)}

    return read


def value(families: dict, family: str, sample: str, **labels: str) -> float:
    """One sample's value, 0 when the series does not exist yet."""
    for s in families[family].samples if family in families else ():
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return 0.0


def test_one_scrape_has_the_gateways_metrics_its_state_and_tritons(scrape, client, gateway):
    client.post("/infer", json={"model_name": "org/loaded", "text": ["a"]})
    families = scrape()

    assert families["embedgate_requests"].type == "counter"
    assert families["embedgate_request_duration_seconds"].type == "histogram"
    assert families["embedgate_inference_stage_seconds"].type == "histogram"
    assert value(families, "embedgate_model_loaded", "embedgate_model_loaded", model="org/loaded", form="python") == 1
    assert value(families, "embedgate_inflight_requests", "embedgate_inflight_requests", model="org/loaded") == 0
    assert value(families, "embedgate_inflight_limit", "embedgate_inflight_limit") == gateway.settings.max_inflight_requests
    assert value(families, "embedgate_triton_restarts", "embedgate_triton_restarts_total") == 2
    assert value(families, "embedgate_triton_ready", "embedgate_triton_ready") == 1
    assert value(families, "embedgate_triton_metrics_up", "embedgate_triton_metrics_up") == 1
    # The parser names counter samples *_total, as the text format 1.0 does.
    assert value(families, "nv_inference_request_success", "nv_inference_request_success_total", model="org--loaded") == 7
    assert "process_resident_memory_bytes" in families


def test_requests_are_counted_by_route_model_and_status(scrape, client):
    before = scrape()
    client.post("/infer", json={"model_name": "org/loaded", "text": ["a"]})
    client.post("/infer", json={"model_name": "org/nothing", "text": ["a"]})
    client.post("/v1/embeddings", json={"model": "org/loaded", "input": "a"})
    after = scrape()

    def delta(**labels: str) -> float:
        name = "embedgate_requests_total"
        return value(after, "embedgate_requests", name, **labels) - value(before, "embedgate_requests", name, **labels)

    assert delta(endpoint="/infer", model="org/loaded", status="200") == 1
    # A model the registry does not have never becomes a label.
    assert delta(endpoint="/infer", model="", status="404") == 1
    assert delta(endpoint="/v1/embeddings", model="org/loaded", status="200") == 1
    count = "embedgate_request_duration_seconds_count"
    assert value(after, "embedgate_request_duration_seconds", count, endpoint="/infer", model="org/loaded") - value(
        before, "embedgate_request_duration_seconds", count, endpoint="/infer", model="org/loaded"
    ) == 1
    stage = "embedgate_inference_stage_seconds_count"
    for name in ("queue", "tokenize", "inference"):
        gained = value(after, "embedgate_inference_stage_seconds", stage, model="org/loaded", stage=name) - value(
            before, "embedgate_inference_stage_seconds", stage, model="org/loaded", stage=name
        )
        assert gained == 2


def test_hostile_paths_share_one_label(scrape, client):
    for i in range(5):
        client.get(f"/no/such/path/{i}")
    families = scrape()
    endpoints = {s.labels["endpoint"] for s in families["embedgate_requests"].samples}
    assert "unmatched" in endpoints
    assert not any(e.startswith("/no/") for e in endpoints)
    client.get("/v1/models/org/loaded")
    endpoints = {s.labels["endpoint"] for s in scrape()["embedgate_requests"].samples}
    assert "/v1/models/{model:path}" in endpoints and "/v1/models/org/loaded" not in endpoints


def test_rejections_are_counted_with_their_reason(scrape, client, gateway):
    async def overloaded(model, ask, plan, *, timeout_s):
        raise Overloaded("model 'org/loaded' has 256 requests in flight")

    gateway.embeddings.answer = overloaded
    labels = {"endpoint": "/infer", "model": "org/loaded", "reason": "overloaded"}
    before = value(scrape(), "embedgate_rejections", "embedgate_rejections_total", **labels)
    assert client.post("/infer", json={"model_name": "org/loaded", "text": ["a"]}).status_code == 503
    assert value(scrape(), "embedgate_rejections", "embedgate_rejections_total", **labels) == before + 1


def test_an_unreachable_triton_is_reported_not_fatal(scrape, gateway):
    gateway.triton.metrics_url = "http://127.0.0.1:9/metrics"  # discard port: nothing listens
    families = scrape()
    assert value(families, "embedgate_triton_metrics_up", "embedgate_triton_metrics_up") == 0
    assert "embedgate_requests" in families and "nv_inference_request_success" not in families


async def test_conversions_are_timed_by_library_and_outcome():
    spec = SimpleNamespace(library="sentence_transformers")

    def count(outcome: str) -> float:
        labels = {"library": "sentence_transformers", "outcome": outcome}
        return REGISTRY.get_sample_value("embedgate_conversion_duration_seconds_count", labels) or 0.0

    @observe_conversion
    async def published(spec, *, timeout_s):
        return "metadata"

    @observe_conversion
    async def failing(spec, *, timeout_s):
        raise ConversionFailed("parity check failed")

    ok_before, failed_before = count("published"), count("conversion_failed")
    assert await published(spec, timeout_s=1) == "metadata"
    with pytest.raises(ConversionFailed):
        await failing(spec, timeout_s=1)
    assert count("published") == ok_before + 1
    assert count("conversion_failed") == failed_before + 1


def test_only_loaded_models_name_a_requests_metrics(tmp_path):
    registry = ModelRegistry(Settings(model_repository=tmp_path), backend=None)
    registry._served["org/loaded"] = SimpleNamespace(name="org/loaded", metadata=SimpleNamespace(model_name="org/loaded"))
    gateway = SimpleNamespace(registry=registry)
    record = RequestRecord()
    token = _current.set(record)
    try:
        with pytest.raises(ModelNotFound):
            served(gateway.registry, "org/unknown")
        assert record.model == ""
        served(gateway.registry, "org/loaded")
        assert record.model == "org/loaded"
    finally:
        _current.reset(token)
