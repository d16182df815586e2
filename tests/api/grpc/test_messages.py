"""TEI's gRPC messages as the TEI HTTP routes' bodies, and the endpoints' answers as TEI's
responses: field by field, with TEI's gRPC defaults (proto3's false and zero)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from embedgate.api.endpoints.envelope import Answer
from embedgate.api.errors import InvalidInput
from embedgate.api.grpc import messages
from embedgate.api.grpc.stubs import tei_pb2 as pb

LEFT = pb.TRUNCATION_DIRECTION_LEFT


def test_embed_takes_teis_options_and_defaults():
    body = messages.embed_body(pb.EmbedRequest(inputs="a text"))
    # proto3's defaults are TEI's gRPC defaults: not normalized, a long text refused, not cut.
    assert (body.inputs, body.normalize, body.truncate, body.truncation_direction, body.prompt_name) == (
        ["a text"], False, False, "Right", None)
    body = messages.embed_body(pb.EmbedRequest(inputs="q", normalize=True, truncate=True, truncation_direction=LEFT,
                                               prompt_name="query"))
    assert (body.normalize, body.truncate, body.truncation_direction, body.prompt_name) == (True, True, "Left", "query")
    assert body.refuses_cuts() is not None  # this server cuts only the end: a cut from the start is refused
    # An empty prompt name set is refused, as the HTTP route refuses it; one not set is none.
    with pytest.raises(ValidationError):
        messages.embed_body(pb.EmbedRequest(inputs="q", prompt_name=""))


def test_an_unknown_truncation_direction_is_refused():
    with pytest.raises(InvalidInput):
        messages.embed_sparse_body(pb.EmbedSparseRequest(inputs="a", truncation_direction=7))


def test_sparse_all_and_tokenize_bodies():
    assert messages.embed_sparse_body(pb.EmbedSparseRequest(inputs="a", prompt_name="p")).prompt_name == "p"
    assert messages.embed_all_body(pb.EmbedAllRequest(inputs="a", truncate=True)).truncate is True
    body = messages.tokenize_body(pb.EncodeRequest(inputs="a", add_special_tokens=True))
    assert (body.inputs, body.add_special_tokens, body.prompt_name) == (["a"], True, None)
    decode = messages.decode_body(pb.DecodeRequest(ids=[101, 7, 102]))
    assert decode.batch() == ([[101, 7, 102]], False) and decode.skip_special_tokens is False


def test_predict_takes_a_text_and_predict_pair_one_or_two():
    assert messages.predict_body(pb.PredictRequest(inputs="t", raw_scores=True)).items() == (["t"], False)
    assert messages.predict_pair_body(pb.PredictPairRequest(inputs=["t"])).items() == (["t"], False)
    assert messages.predict_pair_body(pb.PredictPairRequest(inputs=["a", "b"])).items() == ([("a", "b")], False)
    for count in (0, 3):
        with pytest.raises(InvalidInput, match=f"single or two elements. Given: {count}"):
            messages.predict_pair_body(pb.PredictPairRequest(inputs=["x"] * count))


def test_rerank_body_and_a_streams_groups():
    body = messages.rerank_body(pb.RerankRequest(query="q", texts=["a", "b"], raw_scores=True, return_text=True))
    assert (body.query, body.texts, body.raw_scores, body.return_text) == ("q", ["a", "b"], True, True)
    first = pb.RerankStreamRequest(query="q", text="a", raw_scores=True)
    later = pb.RerankStreamRequest(query="q", text="b", return_text=True)  # its options are not read
    body = messages.rerank_stream_body(first, [first, later])
    assert (body.texts, body.raw_scores, body.return_text) == (["a", "b"], True, False)
    assert messages.same_rerank(first, later)
    assert not messages.same_rerank(first, pb.RerankStreamRequest(query="other", text="c"))
    assert not messages.same_rerank(first, pb.RerankStreamRequest(query="q", text="c", truncate=True))


def test_bodies_stay_as_strict_as_the_http_routes():
    with pytest.raises(ValidationError):
        messages.rerank_body(pb.RerankRequest(query="q" * 10_000_000, texts=["a"]))


def answer(body, **headers) -> Answer:
    return Answer(body, {"x-compute-characters": "6", "x-queue-time-ms": "0.50", "x-tokenize-time-ms": "1.25",
                         "x-inference-time-ms": "2.00", **headers}, tokens=4, total_ms=5.5)


def test_metadata_is_the_cost_the_http_headers_say():
    metadata = messages.embed_response(answer(np.array([[0.5, -1.0]], dtype=np.float32))).metadata
    assert (metadata.compute_chars, metadata.compute_tokens, metadata.total_time_ns, metadata.queue_time_ns,
            metadata.tokenization_time_ns, metadata.inference_time_ns) == (6, 4, 5_500_000, 500_000, 1_250_000,
                                                                         2_000_000)


def test_responses_of_each_answer():
    assert list(messages.embed_response(answer(np.array([[0.5, -1.0]], dtype=np.float32))).embeddings) == [0.5, -1.0]
    sparse = messages.embed_sparse_response(answer([[{"index": 3, "value": 0.25}, {"index": 9, "value": 2.0}]]))
    assert [(v.index, v.value) for v in sparse.sparse_embeddings] == [(3, 0.25), (9, 2.0)]
    tokens = messages.embed_all_response(answer([np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)]))
    assert [list(t.embeddings) for t in tokens.token_embeddings] == [[1.0, 2.0], [3.0, 4.0]]
    predicted = messages.predict_response(answer([{"label": "yes", "score": 0.75}, {"label": "no", "score": 0.25}]))
    assert [(p.label, p.score) for p in predicted.predictions] == [("yes", 0.75), ("no", 0.25)]
    encoded = messages.tokenize_response(answer([[
        {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None},
        {"id": 7, "text": "hi", "special": False, "start": 0, "stop": 2},
    ]]))
    cls, word = encoded.tokens
    assert not cls.HasField("start") and (word.start, word.stop, word.text) == (0, 2, "hi")
    assert messages.decode_response(answer(["hello"])).text == "hello"


def test_ranks_of_several_answers_merge_best_first_with_their_stream_indices():
    first = answer([{"index": 1, "score": 0.5}, {"index": 0, "score": 0.25}])
    second = answer([{"index": 0, "score": 0.75, "text": "c"}])
    merged = messages.rerank_response(messages.ranks(first) + messages.ranks(second, offset=2), [first, second])
    assert [(rank.index, rank.score) for rank in merged.ranks] == [(2, 0.75), (1, 0.5), (0, 0.25)]
    assert merged.ranks[0].text == "c" and not merged.ranks[1].HasField("text")
    assert merged.metadata.compute_chars == 12 and merged.metadata.total_time_ns == 5_500_000


def test_info_is_teis_info_response():
    described = {
        "model_id": "org/m", "model_sha": None, "model_dtype": "float32", "served_model_name": "org/m",
        "model_type": {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}},
        "max_concurrent_requests": 256, "max_input_length": 512, "max_batch_tokens": 32768, "max_batch_requests": 64,
        "max_client_batch_size": 2048, "auto_truncate": True, "tokenization_workers": 2, "version": "0.1.0",
        "sha": None, "docker_label": None,
    }
    info = messages.info_response(described)
    assert info.model_type == pb.MODEL_TYPE_RERANKER and info.model_id == "org/m" and not info.HasField("sha")
    assert (info.max_input_length, info.max_batch_requests, info.tokenization_workers) == (512, 64, 2)


@pytest.mark.parametrize("dim", [0, 1, 384, 4096])
def test_vectors_go_on_the_wire_as_the_floats_they_are(dim):
    """Written as packed float32 bytes (lengths of one to three varint bytes), read back as
    the same floats a message set float by float holds."""
    rows = np.random.default_rng(dim).standard_normal((3, dim)).astype(np.float32)
    embedded = messages.embed_response(answer(rows[:1]))
    assert embedded == pb.EmbedResponse(embeddings=rows[0].tolist(), metadata=embedded.metadata)
    tokens = messages.embed_all_response(answer([rows.astype(np.float64)]))
    assert [list(token.embeddings) for token in tokens.token_embeddings] == rows.tolist()
    assert tokens.metadata.compute_tokens == 4
