"""Timing headers of inference responses, and the per-stage histograms behind them.

The stages add up to the request: ``queue`` (waiting for a tokenizer thread), ``tokenize``,
``inference`` (the Triton round trip, which includes Triton's own batching delay and
queue: Triton does not report them per request); ``total`` also covers validation and
normalization in the gateway. Serialization of the response comes after and is not in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..telemetry.metrics import STAGE_SECONDS

if TYPE_CHECKING:
    from ..compute.requests.results import Embeddings

QUEUE_HEADER = "x-queue-time-ms"
TOKENIZE_HEADER = "x-tokenize-time-ms"
INFERENCE_HEADER = "x-inference-time-ms"
TOTAL_HEADER = "x-total-time-ms"
TRUNCATED_HEADER = "x-truncated-inputs"
CACHED_HEADER = "x-cached-inputs"
IMAGE_LOAD_HEADER = "x-image-load-time-ms"
IMAGE_INFERENCE_HEADER = "x-image-inference-time-ms"
# The request waited this long for its model's load (EMBEDGATE_LOAD_ON_FIRST_REQUEST).
LOAD_HEADER = "x-model-load-time-ms"


def documented_headers(*, text_always: bool) -> dict[str, dict]:
    """The timing headers of an inference answer, as OpenAPI declares response headers.
    ``x-total-time-ms`` is always there; the text stages when the request had text (always,
    with ``text_always``), the image ones when it had images."""
    number = {"type": "number", "minimum": 0}
    text = {
        QUEUE_HEADER: "Waiting for a tokenizer thread, ms.",
        TOKENIZE_HEADER: "Tokenizing, ms.",
        INFERENCE_HEADER: "The Triton round trip, ms.",
    }
    total = {"description": "The whole request in the gateway, ms.", "required": True, "schema": number}
    headers = {TOTAL_HEADER: total}
    for name, description in text.items():
        headers[name] = {"description": description, "required": text_always, "schema": number}
    headers[TRUNCATED_HEADER] = {
        "description": "Inputs cut to the model's max_seq_length.",
        "required": text_always,
        "schema": {"type": "integer", "minimum": 0},
    }
    headers[CACHED_HEADER] = {
        "description": "Inputs answered from the response cache (the model did not run for them).",
        "required": text_always,
        "schema": {"type": "integer", "minimum": 0},
    }
    if not text_always:
        headers[IMAGE_LOAD_HEADER] = {"description": "Fetching and decoding the images, ms.", "schema": number}
        headers[IMAGE_INFERENCE_HEADER] = {"description": "The image tower's Triton calls, ms.", "schema": number}
    return headers


def inference_headers(model: str, result: Embeddings, total_ms: float) -> dict[str, str]:
    """The response headers for one embedding request; also records its stage times."""
    STAGE_SECONDS.labels(model, "queue").observe(result.queue_ms / 1000)
    STAGE_SECONDS.labels(model, "tokenize").observe(result.tokenize_ms / 1000)
    STAGE_SECONDS.labels(model, "inference").observe(result.inference_ms / 1000)
    return {
        QUEUE_HEADER: f"{result.queue_ms:.2f}",
        TOKENIZE_HEADER: f"{result.tokenize_ms:.2f}",
        INFERENCE_HEADER: f"{result.inference_ms:.2f}",
        TOTAL_HEADER: f"{total_ms:.2f}",
        TRUNCATED_HEADER: str(result.truncated),
        CACHED_HEADER: str(result.cached),
    }
