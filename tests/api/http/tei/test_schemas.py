"""TEI's request bodies: its field names and defaults, both spellings of a truncation
direction, strict like the rest of the API (an unknown field refused), and the two fields
TEI's Python client sends beyond TEI's own."""

import pytest
from pydantic import ValidationError

from embedgate.api.endpoints.schemas.tei import (
    TeiDecodeRequest,
    TeiEmbedRequest,
    TeiPredictRequest,
    TeiRerankRequest,
    TeiSimilarityRequest,
    non_empty,
)
from embedgate.api.errors import Empty


def test_teis_defaults():
    body = TeiEmbedRequest.model_validate({"inputs": "a"})
    assert (body.inputs, body.normalize, body.truncate, body.truncation_direction) == (["a"], True, None, "Right")
    rerank = TeiRerankRequest.model_validate({"query": "q", "texts": ["a"]})
    assert (rerank.raw_scores, rerank.return_text) == (False, False)
    assert TeiSimilarityRequest.model_validate({"inputs": {"source_sentence": "a", "sentences": ["b"]}}).options()


@pytest.mark.parametrize("direction", ["Left", "left", "Right", "right"])
def test_both_spellings_of_a_direction(direction):
    assert TeiEmbedRequest.model_validate({"inputs": "a", "truncation_direction": direction})


@pytest.mark.parametrize(
    "model, body",
    [
        (TeiEmbedRequest, {"inputs": "a", "unknown": 1}),
        (TeiEmbedRequest, {"inputs": [1, 2]}),
        (TeiEmbedRequest, {"inputs": "a", "normalize": "yes"}),
        (TeiEmbedRequest, {"inputs": "a", "encoding_format": "base64"}),
        (TeiPredictRequest, {"inputs": "a", "parameters": {"function_to_apply": "none"}}),
        (TeiDecodeRequest, {"ids": [[1], 2]}),
        (TeiDecodeRequest, {"ids": [2**32]}),  # past what a tokenizer takes
        (TeiDecodeRequest, {"ids": [1.5]}),
    ],
)
def test_what_is_refused(model, body):
    with pytest.raises(ValidationError):
        model.model_validate(body)


def test_the_clients_extras_and_shapes():
    assert TeiEmbedRequest.model_validate({"inputs": "a", "encoding_format": "float"})
    predict = TeiPredictRequest.model_validate({"inputs": ["a", "b"], "parameters": {}, "truncate": True})
    assert predict.items() == ([("a", "b")], False)
    assert TeiDecodeRequest.model_validate({"ids": [1, 2]}).batch() == ([[1, 2]], False)
    assert TeiDecodeRequest.model_validate({"ids": [[1], [2]]}).batch() == ([[1], [2]], True)
    # JSON Schema's integers include 7.0.
    assert TeiDecodeRequest.model_validate({"ids": [7.0, 2**32 - 1]}).batch() == ([[7, 2**32 - 1]], False)
    with pytest.raises(Empty, match="`inputs` cannot be empty"):
        non_empty(["a", ""])
