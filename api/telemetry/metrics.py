"""The gateway's own Prometheus metrics.

One registry for the process (the gateway is one process; replicas are scraped one by
one). Labels are bounded on purpose: ``endpoint`` is a route template, ``model`` only ever
a model the registry has loaded, ``status``/``reason``/``outcome`` come from fixed sets.
A hostile client cannot create new series.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, disable_created_metrics

# ``*_created`` series double every counter and histogram and nobody graphs them.
disable_created_metrics()

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

# Seconds; from a cached single sentence (~2 ms) to a request at its default deadline.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CONVERSION_BUCKETS = (5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0)

REQUESTS = Counter(
    "embedgate_requests",
    "HTTP requests answered, by route template, model (inference routes) and status code.",
    ["endpoint", "model", "status"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "embedgate_request_duration_seconds",
    "Time from request start to the end of the response, by route template and model.",
    ["endpoint", "model"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
REJECTIONS = Counter(
    "embedgate_rejections",
    "Requests turned away at once (503/429): reason 'overloaded' is the in-flight limit or "
    "Triton's full queue, 'triton_unavailable' a Triton restart, 'starting' gateway startup.",
    ["endpoint", "model", "reason"],
    registry=REGISTRY,
)
KEY_REQUESTS = Counter(
    "embedgate_key_requests",
    "HTTP requests and gRPC calls answered per API key (its configured name, or key- and a short keyed hash), by "
    "status code (a gRPC call's: the HTTP status TEI's HTTP route answers the same with; 499: cancelled).",
    ["key", "status"],
    registry=REGISTRY,
)
KEY_INPUTS = Counter(
    "embedgate_key_inputs",
    "Inputs (texts, pairs, images) of each key's inference requests answered with 200.",
    ["key"],
    registry=REGISTRY,
)
KEY_REJECTIONS = Counter(
    "embedgate_key_rejections",
    "Each key's requests turned away at once (429/503), by reason: 'rate_limited' (its per-minute limit), "
    "'overloaded' (the in-flight limit, past the key's share, or the model's queue), and the other 503 codes.",
    ["key", "reason"],
    registry=REGISTRY,
)
RPCS = Counter(
    "embedgate_grpc_requests",
    "gRPC calls answered (TEI's gRPC API), by method, model and status code (a stream is one call).",
    ["method", "model", "code"],
    registry=REGISTRY,
)
RPC_SECONDS = Histogram(
    "embedgate_grpc_request_duration_seconds",
    "Time from a gRPC call's start to its status (a stream's whole life), by method and model.",
    ["method", "model"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
RPC_MESSAGES = Counter(
    "embedgate_grpc_stream_messages",
    "Requests answered within gRPC streams (one response each), by method and model.",
    ["method", "model"],
    registry=REGISTRY,
)
STAGE_SECONDS = Histogram(
    "embedgate_inference_stage_seconds",
    "Embedding requests by stage: queue (waiting for a tokenizer thread), tokenize, and "
    "inference (the Triton round trip, including its dynamic-batching delay).",
    ["model", "stage"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
CONVERSIONS = Histogram(
    "embedgate_conversion_duration_seconds",
    "Model conversions (PyTorch to Triton model), by library and outcome ('published' or the error code).",
    ["library", "outcome"],
    buckets=CONVERSION_BUCKETS,
    registry=REGISTRY,
)
IMAGE_FETCH_FAILURES = Counter(
    "embedgate_image_fetch_failures",
    "Images refused, by reason: image_url_refused, image_fetch_failed, image_too_large, invalid_image.",
    ["reason"],
    registry=REGISTRY,
)
MODEL_UNLOADS = Counter(
    "embedgate_model_unloads",
    "Models unloaded by the server itself, by reason: 'budget' (room made for another under the memory budget), "
    "'idle' (its keep-alive ran out).",
    ["model", "reason"],
    registry=REGISTRY,
)
FIRST_REQUEST_LOADS = Counter(
    "embedgate_first_request_loads",
    "Models loaded by a request for them (EMBEDGATE_LOAD_ON_FIRST_REQUEST), by outcome ('loaded' or the error code).",
    ["model", "outcome"],
    registry=REGISTRY,
)

P = ParamSpec("P")
T = TypeVar("T")


def observe_conversion(run: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Decorates the coroutine that runs one conversion (its first argument is the spec)."""

    @functools.wraps(run)
    async def timed(*args: P.args, **kwargs: P.kwargs) -> T:
        library = getattr(args[0], "library", "unknown") if args else "unknown"
        started = time.monotonic()
        outcome = "published"
        try:
            return await run(*args, **kwargs)
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            code = getattr(exc, "code", None)  # an EmbedgateError's code: a fixed set
            outcome = code if isinstance(code, str) else "internal_error"
            raise
        finally:
            CONVERSIONS.labels(library, outcome).observe(time.monotonic() - started)

    return timed


def count_image_fetch_failure(reason: str) -> None:
    """For the image fetcher: ``reason`` must come from a fixed set (never a URL or host)."""
    IMAGE_FETCH_FAILURES.labels(reason).inc()
