"""Embeddings in every precision through the real gateway, as sentence-transformers'
``quantize_embeddings`` gives them with the ranges calibrated once at conversion: the same
text always gives the same bytes, whatever else a request holds. Every precision (and each
of Cohere's /v2/embed types, all from one run) is held to ``quantize_embeddings`` with ranges
the library computes here, from the PyTorch model's embeddings of the calibration texts
(``converters/calibration.py`` makes the texts; the server's own ranges are never read).

The gateway of this module has no response cache: two answers for one text are two runs
of the model, never one row read twice."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest

from tests.helpers import cosine_rows

from .conftest import MINILM, start_gateway, wait_ready

TEXTS = ["A man is eating food.", "The girl is carrying a baby.", "A much longer sentence " * 100, "ok"]


@pytest.fixture(scope="module")
def quantize_embeddings():
    from sentence_transformers.util.quantization import quantize_embeddings

    return quantize_embeddings


@pytest.fixture(scope="module")
def calibration_embeddings(minilm):
    """The PyTorch model's embeddings of the calibration texts, as the model gives them and at
    unit length (keyed by ``normalize``): what ``quantize_embeddings`` takes its ranges from.
    The texts with no prompt, as the docs say the conversion embeds them."""
    from embedgate.converters.calibration import calibration_texts

    raw = minilm.encode(calibration_texts(), prompt="")
    return {False: raw, True: raw / np.linalg.norm(raw, axis=1, keepdims=True)}


# Where the conversion's run and the test's give a range's end a few float32 steps apart
# (1e-7: threads, batch order), a value that lies that close to a step's edge may fall on
# either side of it: one step of difference, there and nowhere else.
EDGE = 1e-6


def assert_quantized_as_the_library(served, floats, precision, calibration, quantize_embeddings) -> None:
    """``served`` (the server's integers for ``floats``) equals ``quantize_embeddings(floats)``
    with the ranges of ``calibration``, value for value (off by one step only on an edge)."""
    served = np.asarray(served)
    floats = np.asarray(floats, dtype=np.float32)
    expected = quantize_embeddings(floats, precision=precision, calibration_embeddings=calibration)
    assert served.shape == expected.shape
    if precision.endswith("binary"):
        np.testing.assert_array_equal(served, expected)
        return
    starts, ends = calibration.min(axis=0), calibration.max(axis=0)
    steps = (ends - starts) / 255
    position = (floats - starts) / steps
    on_edge = np.abs(position - np.round(position)) * steps < EDGE
    differ = served.astype(np.int16) != expected.astype(np.int16)
    assert np.abs(served.astype(np.int16) - expected.astype(np.int16)).max() <= 1
    assert not (differ & ~on_edge).any(), f"{int((differ & ~on_edge).sum())} values off a step's edge differ"


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


def infer(http, texts, **options):
    response = http.post("/infer", json={"model_name": MINILM, "text": texts, **options})
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["text_embeddings"])


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
@pytest.mark.parametrize("normalize", [True, False])
def test_each_precision_is_quantize_embeddings_of_the_float_vectors(
    http, minilm_loaded, calibration_embeddings, quantize_embeddings, precision, normalize
):
    floats = infer(http, TEXTS, normalize=normalize).astype(np.float32)
    served = infer(http, TEXTS, normalize=normalize, precision=precision)
    assert_quantized_as_the_library(served, floats, precision, calibration_embeddings[normalize], quantize_embeddings)
    assert served.shape[1] == (384 if precision.endswith("int8") else 48)


@pytest.mark.parametrize("precision", ["int8", "ubinary"])
def test_the_pytorch_models_vectors_quantize_the_same(
    http, minilm_loaded, calibration_embeddings, quantize_embeddings, minilm, precision
):
    served = infer(http, TEXTS, precision=precision)
    library = minilm.encode(TEXTS, normalize_embeddings=True)
    expected = quantize_embeddings(library, precision=precision, calibration_embeddings=calibration_embeddings[True])
    if precision == "int8":
        # float32 noise may cross a step's edge: one step at most, and rarely.
        difference = np.abs(served.astype(np.int16) - expected.astype(np.int16))
        assert difference.max() <= 1 and (difference == 0).mean() > 0.99
    else:
        assert (served != expected).mean() < 0.002


def test_the_same_text_always_gives_the_same_bytes(http, minilm_loaded):
    alone = infer(http, TEXTS[:1], precision="int8")
    together = infer(http, TEXTS, precision="int8")
    np.testing.assert_array_equal(alone[0], together[0])


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


# --- Cohere's /v2/embed: every embedding type from one run, each the library's

COHERE_TYPES = ["float", "int8", "uint8", "binary", "ubinary", "base64"]


def test_cohere_embedding_types_are_quantize_embeddings_of_the_librarys_vectors(
    http, minilm_loaded, minilm, calibration_embeddings, quantize_embeddings
):
    texts = [f"cohere types: {text}" for text in TEXTS]
    body = {"model": MINILM, "input_type": "search_document", "texts": texts, "embedding_types": COHERE_TYPES}
    response = http.post("/v2/embed", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["x-truncated-inputs"] == "1"  # the long text, cut at its end as the library cuts it
    embeddings = response.json()["embeddings"]
    assert list(embeddings) == COHERE_TYPES
    library = minilm.encode_document(texts, normalize_embeddings=True)
    floats = np.asarray(embeddings["float"], dtype=np.float32)
    assert cosine_rows(floats, library).min() >= 0.9999
    np.testing.assert_allclose(floats, library, atol=1e-4)
    # base64: each row's float32 bytes, little-endian, the very floats of the float rows.
    decoded = np.stack([np.frombuffer(base64.b64decode(row), dtype="<f4") for row in embeddings["base64"]])
    np.testing.assert_array_equal(decoded, floats)
    for precision in ("int8", "uint8", "binary", "ubinary"):
        served = np.asarray(embeddings[precision])
        assert_quantized_as_the_library(served, floats, precision, calibration_embeddings[True], quantize_embeddings)
        # And from the library's own vectors: the float32 noise between two runs of the model
        # may cross a step's edge or a sign, rarely.
        unit = calibration_embeddings[True]
        expected = quantize_embeddings(library, precision=precision, calibration_embeddings=unit)
        if precision.endswith("int8"):
            difference = np.abs(served.astype(np.int16) - expected.astype(np.int16))
            assert difference.max() <= 1 and (difference == 0).mean() > 0.99, precision
        else:
            assert (served != expected).mean() < 0.002, precision


# --- binary answers: the integers' own bytes

@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_raw_bytes_of_each_precision_are_the_librarys(
    http, minilm_loaded, calibration_embeddings, quantize_embeddings, precision
):
    texts = [f"raw bytes: {text}" for text in TEXTS]
    floats = infer(http, texts).astype(np.float32)
    body = {"model_name": MINILM, "text": texts, "precision": precision}
    raw = http.post("/infer", json=body, headers={"accept": "application/octet-stream"})
    assert raw.status_code == 200, raw.text
    dtype = "int8" if precision in ("int8", "binary") else "uint8"
    width = 384 if precision.endswith("int8") else 48
    assert (raw.headers["x-embedding-dtype"], raw.headers["x-embedding-shape"]) == (dtype, f"{len(texts)},{width}")
    served = np.frombuffer(raw.content, dtype=dtype).reshape(len(texts), width)
    assert_quantized_as_the_library(served, floats, precision, calibration_embeddings[True], quantize_embeddings)
    npy = http.post("/infer", json=body, headers={"accept": "application/x-npy"})
    assert npy.status_code == 200, npy.text
    array = np.load(io.BytesIO(npy.content), allow_pickle=False)
    assert array.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(array, served)
