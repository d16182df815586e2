"""One Prometheus scrape for the whole server: the gateway's metrics, gauges read from the
gateway's state at scrape time, and Triton's own metrics fetched from its metrics port.

State gauges (requests in flight per model, loaded models, Triton restarts) are read when
Prometheus asks rather than updated on every request, so they cost nothing per request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .metrics import REGISTRY

if TYPE_CHECKING:
    from ..gateway import Gateway

log = logging.getLogger("embedgate.telemetry")

# The classic text format: what Triton emits and what every Prometheus version reads.
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
TRITON_SCRAPE_TIMEOUT_S = 2.0


class GatewayState:
    """A collector over the live gateway's in-memory state."""

    def __init__(self, gateway: Gateway, *, triton_ready: bool, triton_scraped: bool):
        self.gateway = gateway
        self.triton_ready = triton_ready
        self.triton_scraped = triton_scraped

    def collect(self) -> Iterator[Metric]:
        models = self.gateway.registry.loaded()
        inflight = GaugeMetricFamily(
            "embedgate_inflight_requests", "Embedding requests in flight, per model.", labels=["model"]
        )
        loaded = GaugeMetricFamily(
            "embedgate_model_loaded", "1 for each model loaded in Triton.", labels=["model", "kind", "form"]
        )
        for model in models:
            inflight.add_metric([model.name], model.inflight)
            loaded.add_metric([model.name, model.metadata.kind, model.metadata.form], 1)
        yield inflight
        yield loaded
        yield GaugeMetricFamily(
            "embedgate_inflight_limit",
            "Requests in flight per model beyond which requests are rejected (503).",
            value=self.gateway.settings.max_inflight_requests,
        )
        yield GaugeMetricFamily(
            "embedgate_triton_ready", "1 when Triton is ready to serve.", value=int(self.triton_ready)
        )
        yield GaugeMetricFamily(
            "embedgate_triton_metrics_up",
            "1 when Triton's own metrics were fetched for this scrape.",
            value=int(self.triton_scraped),
        )
        yield CounterMetricFamily(
            "embedgate_triton_restarts",
            "Times the gateway restarted an embedded Triton that died.",
            value=self.gateway.triton.restarts,
        )


async def fetch_triton_metrics(url: str) -> bytes | None:
    # A fresh connection per scrape: a keep-alive connection left open to Triton would
    # hold up its shutdown (see the supervisor), and scrapes come seconds apart.
    try:
        async with httpx.AsyncClient(timeout=TRITON_SCRAPE_TIMEOUT_S) as client:
            response = await client.get(url)
    except httpx.HTTPError as exc:
        log.warning("could not fetch Triton's metrics from %s: %s", url, exc)
        return None
    if response.status_code != 200:
        log.warning("Triton's metrics endpoint %s answered %d", url, response.status_code)
        return None
    text = response.content
    return text if text.endswith(b"\n") else text + b"\n"


async def render(gateway: Gateway) -> bytes:
    triton_text = await fetch_triton_metrics(gateway.triton.metrics_url)
    state = GatewayState(
        gateway, triton_ready=await gateway.triton_ready(), triton_scraped=triton_text is not None
    )
    return generate_latest(REGISTRY) + generate_latest(state) + (triton_text or b"")
