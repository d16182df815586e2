"""TEI's ``GET /info`` of a served model: what TEI reports of the one model it serves, from
the model's metadata and the server's settings."""

from __future__ import annotations

from typing import Any

from ... import __version__
from ...compute.requests.asks import Output
from ...compute.requests.served import ServedModel
from ...settings import Settings

# What TEI calls a model, by what the model is for.
MODEL_TYPES = {Output.RERANK: "reranker", Output.PREDICT: "classifier"}


def model_type(model: ServedModel) -> dict[str, Any]:
    kind = model.kind
    what = MODEL_TYPES.get(kind.main_output())
    if what is None:
        return {"embedding": {"pooling": kind.pooling}}
    labels = kind.labels()
    classes = {"id2label": {str(index): label for index, label in enumerate(labels)},
               "label2id": {label: index for index, label in enumerate(labels)}}
    return {what: classes}


def info(model: ServedModel, settings: Settings) -> dict[str, Any]:
    metadata = model.metadata
    if metadata.variant is not None and metadata.variant.name == "int8":
        dtype = "int8"
    else:
        dtype = metadata.gpu.dtype if metadata.gpu is not None else "float32"
    return {
        "model_id": metadata.model_name,
        "model_sha": None,
        "model_dtype": dtype,
        "served_model_name": model.name,
        "model_type": model_type(model),
        "max_concurrent_requests": settings.max_inflight_requests,
        "max_input_length": metadata.max_seq_length,
        # A Triton call carries at most max_batch_size texts of at most max_seq_length tokens.
        "max_batch_tokens": metadata.max_batch_size * metadata.max_seq_length,
        "max_batch_requests": metadata.max_batch_size,
        "max_client_batch_size": settings.max_texts_per_request,
        "auto_truncate": True,
        "tokenization_workers": settings.tokenizer_threads,
        "version": __version__,
        "sha": None,
        "docker_label": None,
    }
