"""The response cache through the real gateway and tritonserver: a repeated input is
answered without running the model (Triton's counters do not move), with the same vector,
token count and the request's own normalization; hits and misses show in ``/metrics`` and
in Prometheus; two models of one shape never get each other's rows."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests import tiny_models
from tests.helpers import cosine_rows, settled

from .conftest import MINILM, models_loaded

TEXTS = ["a response cache sentence", "another response cache sentence", "a response cache sentence"]
TWINS = ("org/tiny-twin-a", "org/tiny-twin-b")


def triton_inferences(gateway, model: str) -> int:
    stats = httpx.get(f"{gateway.url}/metrics", timeout=30).json()["model_stats"]
    return next(entry["inference_count"] for entry in stats if entry["name"] == model)


def cache_counters(gateway, model: str) -> tuple[float, float]:
    return (
        gateway.metric("embedgate_response_cache_hits_total", model=model),
        gateway.metric("embedgate_response_cache_misses_total", model=model),
    )


def test_a_repeated_input_is_answered_without_running_the_model(gateway, http, minilm_loaded, minilm):
    inferences, (hits, misses) = triton_inferences(gateway, MINILM), cache_counters(gateway, MINILM)
    first = http.post("/infer", json={"model_name": MINILM, "text": TEXTS})
    assert first.status_code == 200, first.text
    assert first.headers["x-cached-inputs"] == "0"
    computed = np.asarray(first.json()["text_embeddings"])
    assert cosine_rows(computed, minilm.encode(TEXTS)).min() >= 0.9999
    # The request's repeated input ran once.
    assert settled(lambda: triton_inferences(gateway, MINILM)) - inferences == 2

    inferences = triton_inferences(gateway, MINILM)
    again = http.post("/infer", json={"model_name": MINILM, "text": TEXTS})
    assert again.status_code == 200, again.text
    assert again.headers["x-cached-inputs"] == "3"
    np.testing.assert_array_equal(np.asarray(again.json()["text_embeddings"]), computed)
    assert settled(lambda: triton_inferences(gateway, MINILM)) == inferences, "the model ran for cached inputs"
    assert cache_counters(gateway, MINILM) == (hits + 3, misses + 3)

    # A cached row gets the request's own normalization.
    raw = http.post("/infer", json={"model_name": MINILM, "text": TEXTS[:1], "normalize": False})
    assert raw.status_code == 200 and raw.headers["x-cached-inputs"] == "1", raw.text
    expected = minilm.encode(TEXTS[:1], normalize_embeddings=False)
    served = np.asarray(raw.json()["text_embeddings"])
    assert cosine_rows(served, expected).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), np.linalg.norm(expected, axis=1), rtol=1e-3)
    assert settled(lambda: triton_inferences(gateway, MINILM)) == inferences

    stats = http.get("/metrics").json()["response_cache"]
    assert stats["entries"] >= 2 and 0 < stats["bytes"] <= stats["max_bytes"]
    assert stats["max_bytes"] == 64 * 1024 * 1024


def test_openai_usage_of_a_cached_input_is_the_computed_one(http, minilm_loaded):
    body = {"model": MINILM, "input": ["usage of a cached answer", "and a second input"]}
    computed = http.post("/v1/embeddings", json=body)
    cached = http.post("/v1/embeddings", json=body)
    assert computed.status_code == cached.status_code == 200, computed.text
    assert (computed.headers["x-cached-inputs"], cached.headers["x-cached-inputs"]) == ("0", "2")
    assert cached.json()["usage"] == computed.json()["usage"]
    assert cached.json()["data"] == computed.json()["data"]


@pytest.fixture(scope="module")
def twins(gateway, tmp_path_factory):
    """Two tiny models of one shape (other random weights): a row of one would pass for
    the other's in every check but the values."""
    root = tmp_path_factory.mktemp("twins")
    directories = {name: tiny_models.dense_model(root / name.split("/")[1], seed=n + 1) for n, name in enumerate(TWINS)}
    with models_loaded(gateway, directories):
        yield directories


def test_two_models_of_one_shape_never_get_each_others_rows(gateway, http, twins):
    from sentence_transformers import SentenceTransformer

    text = ["the quick brown fox jumps over the lazy dog"]
    references = {name: SentenceTransformer(str(path), device="cpu").encode(text) for name, path in twins.items()}
    assert cosine_rows(*references.values())[0] < 0.99, "the twins are too alike to tell apart"
    first, second = TWINS

    answers = {}
    for name in (first, second, second):
        response = http.post("/infer", json={"model_name": name, "text": text})
        assert response.status_code == 200, response.text
        answers.setdefault(name, []).append(response)
    assert [r.headers["x-cached-inputs"] for r in answers[first]] == ["0"]
    assert [r.headers["x-cached-inputs"] for r in answers[second]] == ["0", "1"]
    for name, responses in answers.items():
        for response in responses:
            assert cosine_rows(response.json()["text_embeddings"], references[name])[0] >= 0.9999
    assert cache_counters(gateway, second) == (1, 1)
