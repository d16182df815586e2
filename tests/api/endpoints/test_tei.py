"""TEI's answers from the service's results: sparse values, cosine similarities, ranks best
first, the refusal of a cut input, TEI's timing headers."""

import numpy as np
import pytest

from embedgate.api.compute.requests.results import Embeddings, SparseVector
from embedgate.api.endpoints import envelope, tei
from embedgate.api.endpoints.embed import TeiEmbedSparse
from embedgate.api.endpoints.rerank import TeiRerank
from embedgate.api.endpoints.schemas.tei import TeiRerankRequest, Truncation
from embedgate.api.endpoints.similarity import TeiSimilarity
from embedgate.api.errors import InputTooLong
from embedgate.api.settings import Settings

PARTS = envelope.Parts(None, None, Settings())  # type: ignore[arg-type]


def call(context=None) -> envelope.Call:
    return envelope.Call(None, (), context=context)  # type: ignore[arg-type]


def test_sparse_values_similarities_and_ranks():
    result = Embeddings(np.zeros((1, 5)), [3], 0, 0.0, 0.0,
                        sparse=[SparseVector(np.array([1, 4]), np.array([0.5, 2.0], dtype=np.float32))])
    assert TeiEmbedSparse(PARTS).answer(call(), result) == [[{"index": 1, "value": 0.5}, {"index": 4, "value": 2.0}]]
    unit = Embeddings(np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]]), [1, 1, 1], 0, 0.0, 0.0)
    np.testing.assert_allclose(TeiSimilarity(PARTS).answer(call(), unit), [0.6, 0.0])
    body = TeiRerankRequest(query="q", texts=["a", "b", "c"], return_text=True)
    scores = Embeddings(np.array([[0.5], [2.0], [0.5]]), [1, 1, 1], 0, 0.0, 0.0)
    ranked = TeiRerank(PARTS).answer(call(body), scores)
    assert ranked == [{"index": 1, "score": 2.0, "text": "b"}, {"index": 0, "score": 0.5, "text": "a"},
                      {"index": 2, "score": 0.5, "text": "c"}]


@pytest.mark.parametrize(
    "options, refused",
    [({}, False), ({"truncate": True}, False), ({"truncate": False}, True),
     ({"truncation_direction": "left"}, True), ({"truncation_direction": "Right"}, False)],
)
def test_a_cut_input_is_refused_only_where_cutting_was_forbidden(options, refused):
    class Model:
        name = "org/m"

        class metadata:  # noqa: N801
            max_seq_length = 16

    cut = Embeddings(np.zeros((2, 3)), [16, 3], 1, 0.0, 0.0)
    body = Truncation(**options)
    if refused:
        with pytest.raises(InputTooLong, match="1 input"):
            tei.check_cuts(body, cut, Model)
    else:
        tei.check_cuts(body, cut, Model)
    tei.check_cuts(body, Embeddings(np.zeros((1, 3)), [3], 0, 0.0, 0.0), Model)  # nothing cut: answered


def test_teis_headers_are_whole_milliseconds():
    result = Embeddings(np.zeros((2, 3)), [4, 5], 0, tokenize_ms=1.7, inference_ms=12.2, queue_ms=0.4)
    headers = tei.tei_headers(result, 15.9, characters=11)
    assert headers == {
        "x-compute-time": "15", "x-total-time": "15", "x-tokenization-time": "1", "x-queue-time": "0",
        "x-inference-time": "12", "x-compute-characters": "11", "x-compute-tokens": "9",
    }
    assert set(tei.documented_tei_headers()) == set(headers)
