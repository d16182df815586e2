"""One Prometheus scrape of the real gateway holds its own metrics and the real
tritonserver's; and an external Triton (started here, outside the gateway) is reached for
inference and for its metrics through the settings for external mode."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from embedgate.api.settings import Settings
from embedgate.api.triton.supervisor import TritonSupervisor
from tests.helpers import cosine_rows

from .conftest import MINILM, start_gateway, wait_ready

TRITON_NAME = "sentence-transformers--all-MiniLM-L6-v2"


def scrape(url: str) -> dict:
    response = httpx.get(f"{url}/metrics/prometheus", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def scrape_counted(url: str, model: str, at_least: int) -> dict:
    """A scrape once Triton counts `at_least` successful requests of `model`. Triton adds a
    request to its statistics after the response has gone out, so a scrape right after the
    answer can read the count one short; wait a few seconds for it, never longer."""
    deadline = time.monotonic() + 10
    while True:
        families = scrape(url)
        counted = sample(families, "nv_inference_request_success", "nv_inference_request_success_total", model=model) or 0
        if counted >= at_least or time.monotonic() > deadline:
            return families
        time.sleep(0.1)


def sample(families: dict, family: str, name: str, **labels: str) -> float | None:
    for s in families.get(family, ()).samples if family in families else ():
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_one_scrape_has_gateway_and_triton_metrics(gateway, http, minilm_loaded, tiny_dense):
    # A conversion through this gateway (MiniLM may have been converted by another
    # process of the run and copied here), deleted again at the end.
    load = {"model_name": "observed/tiny", "model_path": str(tiny_dense[0])}
    response = http.post("/load_sentence_transformer_model", json=load)
    assert response.status_code == 200 and response.json()["converted"] is True, response.text
    # Texts of their own: an input seen before is answered from the response cache, and
    # Triton's counters below would not move for it.
    for n in range(3):
        assert http.post("/infer", json={"model_name": MINILM, "text": [f"scraped {n}"]}).status_code == 200
    assert http.post("/v1/embeddings", json={"model": MINILM, "input": "scraped 3"}).status_code == 200
    families = scrape_counted(gateway.url, TRITON_NAME, 4)

    assert sample(families, "embedgate_requests", "embedgate_requests_total", endpoint="/infer", model=MINILM, status="200") >= 3
    assert sample(families, "embedgate_requests", "embedgate_requests_total", endpoint="/v1/embeddings", model=MINILM, status="200") >= 1
    assert sample(families, "embedgate_request_duration_seconds", "embedgate_request_duration_seconds_count", endpoint="/infer", model=MINILM) >= 3
    assert sample(families, "embedgate_inference_stage_seconds", "embedgate_inference_stage_seconds_count", model=MINILM, stage="inference") >= 4
    assert sample(families, "embedgate_model_loaded", "embedgate_model_loaded", model=MINILM) == 1
    assert sample(families, "embedgate_triton_metrics_up", "embedgate_triton_metrics_up") == 1
    assert sample(families, "embedgate_conversion_duration_seconds", "embedgate_conversion_duration_seconds_count", library="sentence_transformers", outcome="published") >= 1
    # Triton's own counters, from its metrics port, in the same scrape.
    assert sample(families, "nv_inference_request_success", "nv_inference_request_success_total", model=TRITON_NAME) >= 4
    assert sample(families, "nv_inference_exec_count", "nv_inference_exec_count_total", model=TRITON_NAME) >= 1
    assert http.post("/delete_model", json={"model_name": "observed/tiny"}).status_code == 200


async def test_external_triton_serves_and_is_scraped(gateway, minilm_loaded, minilm, tmp_path):
    # A repository of its own, holding a copy of the converted MiniLM (no second conversion).
    repository = tmp_path / "repository"
    repository.mkdir()
    shutil.copytree(gateway.repository / TRITON_NAME, repository / TRITON_NAME)
    triton = TritonSupervisor(Settings(model_repository=repository), repository)
    await triton.start()
    external = None
    try:
        external = await asyncio.to_thread(
            start_gateway,
            repository,
            tmp_path / "external.log",
            triton_url=triton.url,
            triton_grpc_url=triton.grpc_url,
            triton_metrics_url=triton.metrics_url,
        )
        await asyncio.to_thread(wait_ready, external)
        async with httpx.AsyncClient(base_url=external.url, timeout=120) as http:
            loaded = await http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
            assert loaded.status_code == 200 and loaded.json()["converted"] is False, loaded.text
            response = await http.post("/infer", json={"model_name": MINILM, "text": ["external triton"]})
            assert response.status_code == 200, response.text
            assert cosine_rows(response.json()["text_embeddings"], minilm.encode(["external triton"]))[0] >= 0.9999
        families = await asyncio.to_thread(scrape_counted, external.url, TRITON_NAME, 1)
        assert sample(families, "embedgate_triton_metrics_up", "embedgate_triton_metrics_up") == 1
        assert sample(families, "nv_inference_request_success", "nv_inference_request_success_total", model=TRITON_NAME) == 1
        assert "starting tritonserver" not in external.log()  # external mode starts none

        # Its owner unloads the model: a request that reaches it before the gateway loads
        # it again (within seconds) is refused with 503 triton_unavailable, then served.
        import tritonclient.http.aio as triton_http

        control = triton_http.InferenceServerClient(triton.url)
        try:
            await control.unload_model(TRITON_NAME)
        finally:
            await control.close()
        async with httpx.AsyncClient(base_url=external.url, timeout=60) as http:
            refused = await http.post("/infer", json={"model_name": MINILM, "text": ["while it is unloaded"]})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "triton_unavailable" and refused.headers["retry-after"]
            deadline = time.monotonic() + 60
            while (again := await http.post("/infer", json={"model_name": MINILM, "text": ["loaded again"]})).status_code != 200:
                assert again.status_code == 503 and time.monotonic() < deadline, again.text
                await asyncio.sleep(0.2)

        # The external Triton dies and is restarted by its owner, with no model loaded: the
        # gateway notices and loads MiniLM again by itself.
        os.kill(triton.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=external.url, timeout=60) as http:
            while True:
                response = await http.post("/infer", json={"model_name": MINILM, "text": ["after its restart"]})
                if response.status_code == 200:
                    break
                assert response.status_code in (502, 503), response.text
                assert time.monotonic() < deadline, external.log()[-3000:]
                await asyncio.sleep(0.5)
        assert cosine_rows(response.json()["text_embeddings"], minilm.encode(["after its restart"]))[0] >= 0.9999
        assert triton.restarts == 1 and "loading it again" in external.log()
    finally:
        if external is not None:
            await asyncio.to_thread(external.stop)
        await triton.stop()
