"""One Prometheus scrape for the whole server: the gateway's metrics, gauges read from the
gateway's state at scrape time, and Triton's own metrics fetched from its metrics port.

State gauges (requests in flight per model, loaded models, Triton restarts) are read when
Prometheus asks rather than updated on every request, so they cost nothing per request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from .merge import merged
from .metrics import REGISTRY

__all__ = ["merged"]

log = logging.getLogger("embedgate.telemetry")

# The classic text format: what Triton emits and what every Prometheus version reads.
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
TRITON_SCRAPE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ModelState:
    name: str
    inflight: int
    kind: str
    form: str
    cache_hits: int = 0
    cache_misses: int = 0
    # Bytes it holds, by memory ("host", "gpu"), where measured (``models/memory.py``).
    memory: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CacheState:
    max_bytes: int
    bytes: int
    entries: int
    evictions: int


@dataclass(frozen=True)
class GatewayState:
    """A collector over the live gateway's in-memory state, as read for one scrape."""

    models: list[ModelState]
    inflight_limit: int
    triton_restarts: int
    triton_ready: bool
    triton_scraped: bool
    # The response cache; None when it is off.
    cache: CacheState | None = None
    # The memory budgets in bytes, by memory, where set.
    memory_budgets: dict[str, int] = field(default_factory=dict)

    def collect(self) -> Iterator[Metric]:
        inflight = GaugeMetricFamily(
            "embedgate_inflight_requests", "Embedding requests in flight, per model.", labels=["model"]
        )
        loaded = GaugeMetricFamily(
            "embedgate_model_loaded", "1 for each model loaded in Triton.", labels=["model", "kind", "form"]
        )
        for model in self.models:
            inflight.add_metric([model.name], model.inflight)
            loaded.add_metric([model.name, model.kind, model.form], 1)
        yield inflight
        yield loaded
        yield from self._memory_metrics()
        yield GaugeMetricFamily(
            "embedgate_inflight_limit",
            "Requests in flight per model beyond which requests are rejected (503).",
            value=self.inflight_limit,
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
            value=self.triton_restarts,
        )
        if self.cache is not None:
            yield from self._cache_metrics(self.cache)

    def _memory_metrics(self) -> Iterator[Metric]:
        memory = GaugeMetricFamily(
            "embedgate_model_memory_bytes",
            "Memory each loaded model holds: 'host' the resident memory of its Triton instances' processes, 'gpu' "
            "what its GPU instances report.",
            labels=["model", "memory"],
        )
        for model in self.models:
            for kind, size in sorted(model.memory.items()):
                memory.add_metric([model.name, kind], size)
        yield memory
        budgets = GaugeMetricFamily(
            "embedgate_memory_budget_bytes", "The memory budget the loaded models share, by memory, where set.",
            labels=["memory"],
        )
        for kind, size in sorted(self.memory_budgets.items()):
            budgets.add_metric([kind], size)
        yield budgets

    def _cache_metrics(self, cache: CacheState) -> Iterator[Metric]:
        hits = CounterMetricFamily(
            "embedgate_response_cache_hits", "Inputs answered from the response cache, per model.", labels=["model"]
        )
        misses = CounterMetricFamily(
            "embedgate_response_cache_misses",
            "Inputs the response cache did not have (the model ran for them), per model.",
            labels=["model"],
        )
        for model in self.models:
            hits.add_metric([model.name], model.cache_hits)
            misses.add_metric([model.name], model.cache_misses)
        yield hits
        yield misses
        yield GaugeMetricFamily("embedgate_response_cache_bytes", "Bytes the response cache holds.", value=cache.bytes)
        yield GaugeMetricFamily(
            "embedgate_response_cache_max_bytes", "The response cache's bound in bytes.", value=cache.max_bytes
        )
        yield GaugeMetricFamily(
            "embedgate_response_cache_entries", "Inputs whose output the response cache holds.", value=cache.entries
        )
        yield CounterMetricFamily(
            "embedgate_response_cache_evictions",
            "Outputs dropped from the response cache to keep it within its bound.",
            value=cache.evictions,
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


# Set by each GPU instance of a Triton model (python_backend/torch_graphs.py's model): its
# weights and all it holds on the GPU (weights, CUDA graphs, buffers), per instance.
GPU_MEMORY_METRIC = "embedgate_gpu_memory_bytes"


def gpu_memory_by_model(text: bytes) -> dict[str, int]:
    """Each Triton model's GPU memory in bytes (its instances' ``total``s summed), read
    from Triton's metrics text."""
    memory: dict[str, int] = {}
    for family in text_string_to_metric_families(text.decode()):
        if family.name != GPU_MEMORY_METRIC:
            continue
        for sample in family.samples:
            if sample.labels.get("part") == "total" and "model" in sample.labels:
                model = sample.labels["model"]
                memory[model] = memory.get(model, 0) + int(sample.value)
    return memory


def cache_state(stats) -> CacheState:
    """The response cache's state from its ``stats()``."""
    return CacheState(stats.max_bytes, stats.bytes, stats.entries, stats.evictions)


def own_text(state: GatewayState | None) -> bytes:
    """This process's metrics, and its gateway's state where it serves (a primary of
    several gateway workers serves none)."""
    return generate_latest(REGISTRY) + (generate_latest(state) if state is not None else b"")
