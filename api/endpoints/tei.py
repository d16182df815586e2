"""What TEI's endpoints (text-embeddings-inference's API) share: the model a ``/tei`` URL
serves, TEI's limit message, where a request the model's kind does not answer should go in
TEI's API, the refusal of an input that had to be cut where the request forbade it, and
TEI's own timing headers beside the project's."""

from __future__ import annotations

from typing import Any, ClassVar

from ..compute.requests.asks import Output
from ..compute.requests.results import Embeddings
from ..compute.requests.served import ServedModel
from ..errors import InputTooLong, NoDefaultModel, TooManyInputs
from ..models.registry import ModelRegistry
from ..telemetry import tag_model
from .envelope import Body, Call, Endpoint, characters
from .schemas.tei import Truncation
from .timing import inference_headers

# Where a request the model's kind does not answer should go instead, in TEI's API.
TEI_ENDPOINTS = {
    Output.EMBED: "/embed and /similarity",
    Output.SPARSE: "/embed_sparse",
    Output.MULTI_VECTOR: "/embed_all",
    Output.RERANK: "/rerank",
    Output.PREDICT: "/predict",
    Output.IMAGES: "POST /infer_image (TEI's API has no images)",
}

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


def check_cuts(body: Truncation, result: Embeddings, model: ServedModel) -> None:
    """Refuses the answer if an input had to be cut and the request forbade it."""
    why = body.refuses_cuts() if result.truncated else None
    if why is not None:
        raise InputTooLong(
            f"{result.truncated} input(s) longer than the {model.metadata.max_seq_length} tokens model "
            f"'{model.name}' takes, and {why}; inputs that fit are answered"
        )


def only_loaded(registry: ModelRegistry) -> ServedModel:
    """The model ``/tei`` serves where EMBEDGATE_TEI_MODEL is not set: the only loaded one."""
    loaded = registry.loaded()
    if len(loaded) != 1:
        names = ", ".join(sorted(model.name for model in loaded)) or "none"
        raise NoDefaultModel(
            f"/tei serves the default model: EMBEDGATE_TEI_MODEL is not set and {len(loaded)} models are loaded "
            f"({names}); name one in the URL, /tei/<model>"
        )
    tag_model(loaded[0].name)
    return loaded[0]


class TeiEndpoint(Endpoint[Body]):
    """A TEI route: the model comes from its URL; answers carry TEI's headers too, and an
    input cut where the request forbade it refuses the answer."""

    elsewhere: ClassVar = TEI_ENDPOINTS

    def limit(self, count: int) -> None:
        limit = self.settings.max_texts_per_request
        if count > limit:
            raise TooManyInputs(f"batch size {count} > maximum allowed batch size {limit}")

    def headers(self, call: Call, results: list[Embeddings], total_ms: float) -> dict[str, str]:
        return {
            **inference_headers(call.model.name, results[0], total_ms),
            **tei_headers(results[0], total_ms, characters(call.charged)),
        }

    def respond(self, call: Call, results: list[Embeddings]) -> Any:
        truncation = call.context
        check_cuts(truncation, results[0], call.model)
        return self.answer(call, results[0])

    def answer(self, call: Call, result: Embeddings) -> Any:
        """The answer's body (TEI's shape), once the inputs' cuts were allowed."""
        raise NotImplementedError
