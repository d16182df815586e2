"""Request bodies and response parsing per endpoint."""

import orjson
import pytest

from embedgate.bench.endpoints import InferEndpoint, OpenAIEndpoint, build_endpoint, timing_headers


def test_infer_bodies_follow_the_seed_api():
    assert orjson.loads(InferEndpoint("org/m").body(["a", "b"], "text")) == {"model_name": "org/m", "text": ["a", "b"]}
    clip = InferEndpoint("ViT-B-32", pretrained="laion").body(["data:x"], "image")
    assert orjson.loads(clip) == {"model_name": "ViT-B-32", "image": ["data:x"], "pretrained": "laion"}


def test_infer_responses_give_count_server_time_timings_and_zero_detection():
    raw = orjson.dumps({"text_embeddings": [[0.0, 0.5], [0.1, 0.2]], "processingTimeMs": 4.5})
    headers = {"X-Tokenize-Time-Ms": "0.25", "x-total-time-ms": "4.5", "x-truncated-inputs": "0"}
    parsed = InferEndpoint("m").parse(raw, headers, "text")
    assert parsed.embeddings == 2 and parsed.server_ms == 4.5
    assert parsed.timings_ms == {"tokenize": 0.25, "total": 4.5}
    assert parsed.zero_vectors is False and parsed.cached == 0
    assert InferEndpoint("m").parse(raw, {**headers, "x-cached-inputs": "2"}, "text").cached == 2
    zeros = orjson.dumps({"image_embeddings": [[0.0, 0.0]], "processingTimeMs": 1})
    assert InferEndpoint("m").parse(zeros, {}, "image").zero_vectors is True


def test_openai_bodies_and_responses():
    endpoint = build_endpoint("/v1/embeddings", "org/m")
    assert orjson.loads(endpoint.body(["a"], "text")) == {"model": "org/m", "input": ["a"]}
    raw = orjson.dumps({"object": "list", "data": [{"embedding": [0.3], "index": 0}], "usage": {}})
    parsed = endpoint.parse(raw, {"x-total-time-ms": "2.0"}, "text")
    assert parsed.embeddings == 1 and parsed.server_ms == 2.0 and not parsed.zero_vectors
    with pytest.raises(ValueError):
        OpenAIEndpoint("m").body(["data:x"], "image")
    with pytest.raises(ValueError):
        build_endpoint("/v1/embeddings", "m", pretrained="laion")
    with pytest.raises(ValueError):
        build_endpoint("/embed", "m")


def test_malformed_timing_headers_are_ignored():
    assert timing_headers({"x-queue-time-ms": "n/a", "x-request-id": "1", "x-inference-time-ms": "3"}) == {"inference": 3.0}


def test_tei_embed_bodies_and_responses():
    endpoint = build_endpoint("/tei/embed", "org/m")
    assert endpoint.path == "/tei/org/m/embed"
    assert orjson.loads(endpoint.body(["a", "b"], "text")) == {"inputs": ["a", "b"]}
    parsed = endpoint.parse(orjson.dumps([[0.5, 0.1], [0.2, 0.3]]), {"x-total-time-ms": "3.5"}, "text")
    assert (parsed.embeddings, parsed.server_ms, parsed.zero_vectors) == (2, 3.5, False)
    with pytest.raises(ValueError):
        endpoint.body(["data:x"], "image")
