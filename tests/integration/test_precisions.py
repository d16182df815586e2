"""Embeddings in every precision through the real gateway, as sentence-transformers'
``quantize_embeddings`` gives them with the ranges calibrated once at conversion: the same
text always gives the same bytes, whatever else a request holds.

The gateway of this module has no response cache: two answers for one text are two runs
of the model, never one row read twice."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import MINILM, start_gateway, wait_ready

TEXTS = ["A man is eating food.", "The girl is carrying a baby.", "A much longer sentence " * 100, "ok"]


@pytest.fixture(scope="module")
def quantize_embeddings():
    from sentence_transformers.quantization import quantize_embeddings

    return quantize_embeddings


@pytest.fixture(scope="module")
def uncached(gateway, minilm_published, tmp_path_factory):
    """A gateway with no response cache on the session's repository (MiniLM converted
    there by the session's gateway, and restored here from its manifest)."""
    with gateway.client() as http:
        assert http.post("/load_sentence_transformer_model", json={"model_name": MINILM}).status_code == 200
    logs = tmp_path_factory.mktemp("precisions")
    server = start_gateway(gateway.repository, logs / "gateway.log", response_cache_mb="0", preload_models=MINILM)
    try:
        wait_ready(server)
        yield server
    finally:
        server.stop()


@pytest.fixture
def http(uncached):
    with uncached.client() as client:
        yield client


@pytest.fixture
def minilm_loaded(http):
    assert http.get("/metrics").json()["response_cache"] is None


@pytest.fixture
def calibration(gateway, minilm_loaded):
    metadata = json.loads((gateway.repository / MINILM.replace("/", "--") / "metadata.json").read_text())
    return metadata["calibration"]


def infer(http, texts, **options):
    response = http.post("/infer", json={"model_name": MINILM, "text": texts, **options})
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["text_embeddings"])


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
@pytest.mark.parametrize("normalize", [True, False])
def test_each_precision_is_quantize_embeddings_of_the_float_vectors(
    http, calibration, quantize_embeddings, precision, normalize
):
    floats = infer(http, TEXTS, normalize=normalize).astype(np.float32)
    served = infer(http, TEXTS, normalize=normalize, precision=precision)
    ranges = np.asarray(calibration["normalized_ranges" if normalize else "ranges"])
    expected = quantize_embeddings(floats, precision=precision, ranges=ranges)
    np.testing.assert_array_equal(served, expected)
    assert served.shape[1] == (384 if precision.endswith("int8") else 48)


@pytest.mark.parametrize("precision", ["int8", "ubinary"])
def test_the_pytorch_models_vectors_quantize_the_same(http, calibration, quantize_embeddings, minilm, precision):
    served = infer(http, TEXTS, precision=precision)
    ranges = np.asarray(calibration["normalized_ranges"])
    expected = quantize_embeddings(minilm.encode(TEXTS, normalize_embeddings=True), precision=precision, ranges=ranges)
    if precision == "int8":
        # float32 noise may cross a step's edge: one step at most, and rarely.
        difference = np.abs(served.astype(np.int16) - expected.astype(np.int16))
        assert difference.max() <= 1 and (difference == 0).mean() > 0.99
    else:
        assert (served != expected).mean() < 0.002


def test_the_same_text_always_gives_the_same_bytes(http, calibration):
    alone = infer(http, TEXTS[:1], precision="int8")
    together = infer(http, TEXTS, precision="int8")
    np.testing.assert_array_equal(alone[0], together[0])
    assert calibration["texts"] == 256


def test_openai_encoding_formats_give_the_same_integers(http, minilm_loaded):
    for precision in ("int8", "uint8", "binary", "ubinary"):
        response = http.post("/v1/embeddings", json={"model": MINILM, "input": TEXTS, "encoding_format": precision})
        assert response.status_code == 200, response.text
        served = np.asarray([row["embedding"] for row in response.json()["data"]])
        np.testing.assert_array_equal(served, infer(http, TEXTS, precision=precision))
    shortened = http.post(
        "/v1/embeddings", json={"model": MINILM, "input": TEXTS, "encoding_format": "int8", "dimensions": 64}
    )
    assert shortened.status_code == 400 and shortened.json()["error"]["param"] == "dimensions"


def test_the_listing_shows_the_precisions(http, minilm_loaded):
    listed = {m["model_name"]: m for m in http.get("/loaded_models").json()["models"]}
    assert listed[MINILM]["precisions"] == ["float32", "int8", "uint8", "binary", "ubinary"]
