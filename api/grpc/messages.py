"""TEI's gRPC messages, translated: a request message becomes the body of the TEI HTTP route
of the same operation (``endpoints/schemas/tei.py``), checked by the same model, and the
endpoint's answer becomes the response message. Nothing here decides anything: what is
refused, cut, charged or limited is the endpoint's, as on the HTTP route.

One gRPC request is one input (TEI's messages carry one text, one pair, one list of ids);
``RerankRequest`` carries its texts, and ``RerankStream``'s messages are gathered into
rerank bodies (:func:`rerank_stream_body`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..endpoints.envelope import Answer
from ..endpoints.schemas.tei import (
    TeiDecodeRequest,
    TeiEmbedAllRequest,
    TeiEmbedRequest,
    TeiEmbedSparseRequest,
    TeiPredictRequest,
    TeiRerankRequest,
    TeiTokenizeRequest,
)
from ..endpoints.timing import INFERENCE_HEADER, QUEUE_HEADER, TOKENIZE_HEADER
from ..errors import InvalidInput
from .stubs import tei_pb2 as pb

DIRECTIONS = {pb.TRUNCATION_DIRECTION_RIGHT: "Right", pb.TRUNCATION_DIRECTION_LEFT: "Left"}
MODEL_TYPES = {"embedding": pb.MODEL_TYPE_EMBEDDING, "classifier": pb.MODEL_TYPE_CLASSIFIER,
               "reranker": pb.MODEL_TYPE_RERANKER}
NS_PER_MS = 1_000_000


def _direction(value: int) -> str:
    direction = DIRECTIONS.get(value)
    if direction is None:
        raise InvalidInput(f"truncation_direction: unknown value {value}")
    return direction


def _truncation(message: Any) -> dict[str, Any]:
    # proto3's false is TEI's gRPC default: a text longer than the model takes is refused
    # unless the request asks for it to be cut.
    return {"truncate": message.truncate, "truncation_direction": _direction(message.truncation_direction)}


def _prompt(message: Any) -> str | None:
    return message.prompt_name if message.HasField("prompt_name") else None


# --- requests: each message as the body of its HTTP route

def embed_body(message: pb.EmbedRequest) -> TeiEmbedRequest:
    return TeiEmbedRequest.model_validate({
        "inputs": message.inputs, "normalize": message.normalize, "prompt_name": _prompt(message),
        **_truncation(message),
    })


def embed_sparse_body(message: pb.EmbedSparseRequest) -> TeiEmbedSparseRequest:
    return TeiEmbedSparseRequest.model_validate(
        {"inputs": message.inputs, "prompt_name": _prompt(message), **_truncation(message)}
    )


def embed_all_body(message: pb.EmbedAllRequest) -> TeiEmbedAllRequest:
    return TeiEmbedAllRequest.model_validate(
        {"inputs": message.inputs, "prompt_name": _prompt(message), **_truncation(message)}
    )


def predict_body(message: pb.PredictRequest) -> TeiPredictRequest:
    return TeiPredictRequest.model_validate(
        {"inputs": message.inputs, "raw_scores": message.raw_scores, **_truncation(message)}
    )


def predict_pair_body(message: pb.PredictPairRequest) -> TeiPredictRequest:
    """One text, or a pair: TEI takes one or two inputs, and refuses more."""
    inputs = list(message.inputs)
    if len(inputs) not in (1, 2):
        raise InvalidInput(f"`inputs` must have a single or two elements. Given: {len(inputs)}")
    return TeiPredictRequest.model_validate({
        "inputs": inputs[0] if len(inputs) == 1 else inputs, "raw_scores": message.raw_scores,
        **_truncation(message),
    })


def rerank_body(message: pb.RerankRequest) -> TeiRerankRequest:
    return TeiRerankRequest.model_validate({
        "query": message.query, "texts": list(message.texts), "raw_scores": message.raw_scores,
        "return_text": message.return_text, **_truncation(message),
    })


def same_rerank(head: pb.RerankStreamRequest, message: pb.RerankStreamRequest) -> bool:
    """Whether ``message`` of a ``RerankStream`` is ranked in the same request as ``head``:
    the same query, cut the same way."""
    return (message.query == head.query and message.truncate == head.truncate
            and message.truncation_direction == head.truncation_direction)


def rerank_stream_body(first: pb.RerankStreamRequest, group: Sequence[pb.RerankStreamRequest]) -> TeiRerankRequest:
    """A group of a ``RerankStream``'s messages (:func:`same_rerank`) as one rerank body;
    ``raw_scores`` and ``return_text`` are the stream's first message's, as TEI reads them."""
    head = group[0]
    return TeiRerankRequest.model_validate({
        "query": head.query, "texts": [message.text for message in group], "raw_scores": first.raw_scores,
        "return_text": first.return_text, **_truncation(head),
    })


def tokenize_body(message: pb.EncodeRequest) -> TeiTokenizeRequest:
    return TeiTokenizeRequest.model_validate({
        "inputs": message.inputs, "add_special_tokens": message.add_special_tokens, "prompt_name": _prompt(message),
    })


def decode_body(message: pb.DecodeRequest) -> TeiDecodeRequest:
    return TeiDecodeRequest.model_validate(
        {"ids": list(message.ids), "skip_special_tokens": message.skip_special_tokens}
    )


# --- answers: each endpoint's answer as the response message

def _ms(headers: dict[str, str], name: str) -> int:
    value = headers.get(name)
    return int(float(value) * NS_PER_MS) if value else 0


def metadata(answer: Answer) -> pb.Metadata:
    """What the request cost, as TEI's gRPC responses say it (its HTTP timing headers)."""
    headers = answer.headers
    return pb.Metadata(
        compute_chars=int(headers.get("x-compute-characters", 0)),
        compute_tokens=answer.tokens,
        total_time_ns=int(answer.total_ms * NS_PER_MS),
        tokenization_time_ns=_ms(headers, TOKENIZE_HEADER),
        queue_time_ns=_ms(headers, QUEUE_HEADER),
        inference_time_ns=_ms(headers, INFERENCE_HEADER),
    )


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _packed_floats(row: Any) -> bytes:
    """Field 1 as ``repeated float`` (packed) on the wire: the row's float32 bytes as they are.
    Parsed into a message, that is a copy; the same list set float by float costs ten times as
    much (about 11 µs for 384 floats, on every response of a stream)."""
    data = np.asarray(row, dtype="<f4").tobytes()
    return b"\x0a" + _varint(len(data)) + data


def embed_response(answer: Answer) -> pb.EmbedResponse:
    response = pb.EmbedResponse.FromString(_packed_floats(answer.body[0]))
    response.metadata.CopyFrom(metadata(answer))
    return response


def embed_sparse_response(answer: Answer) -> pb.EmbedSparseResponse:
    values = [pb.SparseValue(index=item["index"], value=item["value"]) for item in answer.body[0]]
    return pb.EmbedSparseResponse(sparse_embeddings=values, metadata=metadata(answer))


def embed_all_response(answer: Answer) -> pb.EmbedAllResponse:
    tokens = [_packed_floats(row) for row in np.asarray(answer.body[0], dtype="<f4")]
    response = pb.EmbedAllResponse.FromString(b"".join(b"\x0a" + _varint(len(token)) + token for token in tokens))
    response.metadata.CopyFrom(metadata(answer))
    return response


def predict_response(answer: Answer) -> pb.PredictResponse:
    predictions = [pb.Prediction(score=item["score"], label=item["label"]) for item in answer.body]
    return pb.PredictResponse(predictions=predictions, metadata=metadata(answer))


def ranks(answer: Answer, offset: int = 0) -> list[pb.Rank]:
    return [pb.Rank(index=item["index"] + offset, score=item["score"], text=item.get("text")) for item in answer.body]


def rerank_response(ranked: list[pb.Rank], answers: Sequence[Answer]) -> pb.RerankResponse:
    """Ranks of one or more rerank answers, best first, with their summed cost."""
    ranked.sort(key=lambda rank: -rank.score)
    cost = pb.Metadata()
    for answer in answers:
        part = metadata(answer)
        for field in ("compute_chars", "compute_tokens", "tokenization_time_ns", "queue_time_ns",
                      "inference_time_ns"):
            setattr(cost, field, getattr(cost, field) + getattr(part, field))
        cost.total_time_ns = max(cost.total_time_ns, part.total_time_ns)
    return pb.RerankResponse(ranks=ranked, metadata=cost)


def tokenize_response(answer: Answer) -> pb.EncodeResponse:
    return pb.EncodeResponse(tokens=[pb.SimpleToken(**token) for token in answer.body[0]])


def decode_response(answer: Answer) -> pb.DecodeResponse:
    return pb.DecodeResponse(text=answer.body[0])


def info_response(described: dict[str, Any]) -> pb.InfoResponse:
    """TEI's ``/info`` of the model (``http/tei/info.py``) as TEI's ``InfoResponse``."""
    [kind] = described["model_type"]
    fields = {name: described[name] for name in (
        "version", "sha", "docker_label", "model_id", "model_sha", "model_dtype", "max_concurrent_requests",
        "max_input_length", "max_batch_tokens", "max_batch_requests", "max_client_batch_size",
        "tokenization_workers",
    )}
    return pb.InfoResponse(model_type=MODEL_TYPES[kind], **{k: v for k, v in fields.items() if v is not None})
