"""TEI's answers from the embedding service's results: embeddings (cut to ``dimensions``),
sparse values, token vectors, similarities, ranks; its timing headers; and the refusal of
an input that had to be cut where the request forbade it."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...compute.requests.asks import Ask, Options, Output
from ...compute.requests.prompts import PromptChoice
from ...compute.requests.results import Embeddings
from ...compute.requests.served import ServedModel
from ...errors import InvalidInput
from ..openai.vectors import shorten
from .errors import InputTooLong
from .schemas import TeiEmbedRequest, TeiRerankRequest, Truncation


def embed_ask(body: TeiEmbedRequest, model: ServedModel) -> Ask:
    """Dense embeddings; ``dimensions`` checked against the model (TEI's 422)."""
    if body.dimensions is not None and body.dimensions > model.metadata.embedding_dim:
        raise InvalidInput(
            f"dimensions must be at most the model's {model.metadata.embedding_dim} (model '{model.name}')"
        )
    options = Options(normalize=body.normalize, normalize_given=True)
    return Ask(Output.EMBED, body.inputs, PromptChoice(prompt_name=body.prompt_name), options)


def embeddings(body: TeiEmbedRequest, vectors: np.ndarray) -> np.ndarray:
    """The first ``dimensions`` of each vector, then unit length if asked (as TEI and
    ``encode(truncate_dim=..., normalize_embeddings=...)`` order them)."""
    if body.dimensions is None or body.dimensions >= vectors.shape[1]:
        return vectors
    if body.normalize:
        return shorten(vectors, body.dimensions)
    return np.ascontiguousarray(vectors[:, : body.dimensions])


def sparse_values(result: Embeddings) -> list[list[dict[str, Any]]]:
    """Each input's non-zero weights, by ascending index."""
    return [
        [{"index": index, "value": value} for index, value in zip(row.indices.tolist(), row.values.tolist())]
        for row in result.sparse or ()
    ]


def similarities(vectors: np.ndarray) -> np.ndarray:
    """The cosine of the first (unit-length) vector with each of the others."""
    return vectors[1:] @ vectors[0]


def ranks(body: TeiRerankRequest, scores: np.ndarray) -> list[dict[str, Any]]:
    """Every text's score ([texts, 1]), best first (equal scores keep the texts' order)."""
    column = scores[:, 0]
    order = np.argsort(-column, kind="stable")
    if not body.return_text:
        return [{"index": int(index), "score": float(column[index])} for index in order]
    return [{"index": int(index), "score": float(column[index]), "text": body.texts[index]} for index in order]


def check_cuts(body: Truncation, result: Embeddings, model: ServedModel) -> None:
    """Refuses the answer if an input had to be cut and the request forbade it."""
    why = body.refuses_cuts() if result.truncated else None
    if why is not None:
        raise InputTooLong(
            f"{result.truncated} input(s) longer than the {model.metadata.max_seq_length} tokens model "
            f"'{model.name}' takes, and {why}; inputs that fit are answered"
        )


# TEI's own timing headers (whole milliseconds), sent beside the project's x-*-time-ms.
TEI_HEADERS = {
    "x-compute-time": "The whole request, ms (TEI's name).",
    "x-total-time": "The whole request, ms (TEI's name).",
    "x-tokenization-time": "Tokenizing, ms (TEI's name).",
    "x-queue-time": "Waiting for a tokenizer thread, ms (TEI's name).",
    "x-inference-time": "The Triton round trip, ms (TEI's name).",
    "x-compute-characters": "Characters of the inputs.",
    "x-compute-tokens": "Tokens the model saw, after truncation.",
}


def tei_headers(result: Embeddings, total_ms: float, characters: int) -> dict[str, str]:
    total = str(int(total_ms))
    return {
        "x-compute-time": total,
        "x-total-time": total,
        "x-tokenization-time": str(int(result.tokenize_ms)),
        "x-queue-time": str(int(result.queue_ms)),
        "x-inference-time": str(int(result.inference_ms)),
        "x-compute-characters": str(characters),
        "x-compute-tokens": str(sum(result.token_counts)),
    }


def documented_tei_headers() -> dict[str, dict]:
    return {
        name: {"description": description, "required": True, "schema": {"type": "integer", "minimum": 0}}
        for name, description in TEI_HEADERS.items()
    }
