"""Request bodies and response parsing for the endpoints the benchmark can load.

Bodies are serialized once per request with orjson and responses parsed with orjson:
the load generator shares the machine with the server, so its own CPU per request is
kept small (and reported).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import orjson

ENDPOINTS = ("/infer", "/v1/embeddings", "/tei/embed")
# Every timing header the gateway sends has this shape (x-tokenize-time-ms, ...).
_TIMING_PREFIX, _TIMING_SUFFIX = "x-", "-time-ms"


@dataclass(frozen=True)
class Parsed:
    embeddings: int
    server_ms: float | None  # the server's own processing time for the request
    timings_ms: dict[str, float]  # the x-*-time-ms headers, keyed by their middle part
    zero_vectors: bool  # the first embedding is all zeros (a no-op inference server)
    cached: int = 0  # inputs the server answered from its response cache


def cached_inputs(headers: Mapping[str, str]) -> int:
    try:
        return int(headers.get("x-cached-inputs", 0))
    except ValueError:
        return 0


def timing_headers(headers: Mapping[str, str]) -> dict[str, float]:
    timings = {}
    for key, value in headers.items():
        key = key.lower()
        if key.startswith(_TIMING_PREFIX) and key.endswith(_TIMING_SUFFIX):
            try:
                timings[key[len(_TIMING_PREFIX) : -len(_TIMING_SUFFIX)]] = float(value)
            except ValueError:
                continue
    return timings


class InferEndpoint:
    """``POST /infer`` in the seed's shape: ``text`` or ``image`` lists in,
    ``text_embeddings`` or ``image_embeddings`` and ``processingTimeMs`` out."""

    path = "/infer"

    def __init__(self, model: str, pretrained: str | None = None):
        self.model = model
        # OpenCLIP models are named by model_name and pretrained together.
        self.extra = {"pretrained": pretrained} if pretrained else {}

    def body(self, inputs: list[str], kind: str) -> bytes:
        return orjson.dumps({"model_name": self.model, kind: inputs, **self.extra})

    def parse(self, raw: bytes, headers: Mapping[str, str], kind: str) -> Parsed:
        answer = orjson.loads(raw)
        vectors = answer[f"{kind}_embeddings"]
        server_ms = answer.get("processingTimeMs")
        return Parsed(
            embeddings=len(vectors),
            server_ms=float(server_ms) if server_ms is not None else None,
            timings_ms=timing_headers(headers),
            zero_vectors=bool(vectors) and not any(vectors[0]),
            cached=cached_inputs(headers),
        )


class OpenAIEndpoint:
    """``POST /v1/embeddings``: ``input`` in, ``data[].embedding`` out; the server's
    processing time comes from its ``x-total-time-ms`` header."""

    path = "/v1/embeddings"

    def __init__(self, model: str):
        self.model = model

    def body(self, inputs: list[str], kind: str) -> bytes:
        if kind != "text":
            raise ValueError("/v1/embeddings takes text only")
        return orjson.dumps({"model": self.model, "input": inputs})

    def parse(self, raw: bytes, headers: Mapping[str, str], kind: str) -> Parsed:
        data = orjson.loads(raw)["data"]
        timings = timing_headers(headers)
        return Parsed(
            embeddings=len(data),
            server_ms=timings.get("total"),
            timings_ms=timings,
            zero_vectors=bool(data) and not any(data[0]["embedding"]),
            cached=cached_inputs(headers),
        )


class TeiEmbedEndpoint:
    """TEI's ``POST /tei/<model>/embed``: ``inputs`` in, a list of embeddings out (the HTTP
    route of TEI's gRPC ``Embed``, which the benchmark loads too)."""

    def __init__(self, model: str):
        self.path = f"/tei/{model}/embed"

    def body(self, inputs: list[str], kind: str) -> bytes:
        if kind != "text":
            raise ValueError("/tei/embed takes text only")
        return orjson.dumps({"inputs": inputs})

    def parse(self, raw: bytes, headers: Mapping[str, str], kind: str) -> Parsed:
        vectors = orjson.loads(raw)
        timings = timing_headers(headers)
        return Parsed(
            embeddings=len(vectors),
            server_ms=timings.get("total"),
            timings_ms=timings,
            zero_vectors=bool(vectors) and not any(vectors[0]),
            cached=cached_inputs(headers),
        )


Endpoint = InferEndpoint | OpenAIEndpoint | TeiEmbedEndpoint


def build_endpoint(path: str, model: str, pretrained: str | None = None) -> Endpoint:
    if path == InferEndpoint.path:
        return InferEndpoint(model, pretrained)
    if path == OpenAIEndpoint.path:
        if pretrained:
            raise ValueError("/v1/embeddings names a model by 'model' alone; drop --pretrained")
        return OpenAIEndpoint(model)
    if path == "/tei/embed":
        if pretrained:
            raise ValueError("/tei/embed names a model by its URL alone; drop --pretrained")
        return TeiEmbedEndpoint(model)
    raise ValueError(f"unknown endpoint {path!r}; choose from {', '.join(ENDPOINTS)}")
