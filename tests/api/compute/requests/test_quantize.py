"""The gateway's quantization (numpy only) gives exactly what sentence-transformers'
``quantize_embeddings`` gives, for every precision."""

import numpy as np
import pytest

from embedgate.api.compute.requests.quantize import PRECISIONS, available, quantize, quantized
from embedgate.api.errors import InvalidInput
from embedgate.converters.calibration import calibrate, calibration_texts


@pytest.fixture(scope="module")
def quantize_embeddings():
    from sentence_transformers.quantization import quantize_embeddings

    return quantize_embeddings


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dim", [384, 13])  # 13: the last packed byte is partly padding
def test_every_precision_equals_sentence_transformers(quantize_embeddings, precision, dim):
    rng = np.random.default_rng(dim)
    calibration = rng.normal(size=(300, dim)).astype(np.float32)
    # Beyond the calibrated ranges too: those values clip.
    vectors = (rng.normal(size=(50, dim)) * 1.5).astype(np.float32)
    ranges = np.stack([calibration.min(0), calibration.max(0)])
    ours = quantize(vectors, precision, ranges.tolist())
    theirs = quantize_embeddings(vectors, precision=precision, ranges=ranges)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


def test_ranges_are_the_models_own_whatever_else_the_request_holds():
    rng = np.random.default_rng(1)
    ranges = calibrate(rng.normal(size=(100, 8)).astype(np.float32)).ranges
    vectors = rng.normal(size=(10, 8)).astype(np.float32)
    alone = quantize(vectors[:1], "int8", ranges)
    assert np.array_equal(alone, quantize(vectors, "int8", ranges)[:1])


def test_calibration_keeps_the_unit_vectors_ranges_too():
    vectors = np.array([[3.0, 4.0], [-1.0, 0.0]], dtype=np.float32)
    calibration = calibrate(vectors)
    assert calibration.ranges == [[-1.0, 0.0], [3.0, 4.0]]
    np.testing.assert_allclose(calibration.normalized_ranges, [[-1.0, 0.0], [0.6, 0.8]])
    assert calibration.texts == 2


def test_calibration_texts_are_fixed_and_varied():
    texts = calibration_texts()
    assert texts == calibration_texts() and len(set(texts)) > 200
    assert min(map(len, texts)) < 30 < max(map(len, texts))


def test_without_calibration_int8_is_refused_and_the_bit_precisions_remain():
    vectors = np.ones((2, 8), dtype=np.float32)
    assert available(None) == ("float32", "binary", "ubinary")
    with pytest.raises(InvalidInput, match="uint8 needs ranges calibrated at conversion.*image embeddings"):
        quantized(vectors, "uint8", None, normalized=True, what="image embeddings")
    assert quantized(vectors, "ubinary", None, normalized=True, what="x").tolist() == [[255], [255]]
