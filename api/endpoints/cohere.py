"""Cohere's v2 API: ``POST /v2/embed`` (and a batch job's ``/v2/embed`` lines) and
``POST /v2/rerank``, as Cohere's client (``cohere.ClientV2`` pointed at this server) calls them.

``/v2/embed`` embeds texts, images or inputs of content parts in one ask: a CLIP or
multimodal model plans its texts and images each through its own route (``compute/requests/media.py``) and
answers them in the inputs' order. Its embeddings are unit length, in every type asked for
from one float32 run: ``int8``/``uint8`` on the model's calibrated ranges (texts only),
``binary``/``ubinary`` packed as sentence-transformers' ``quantize_embeddings`` packs them,
``base64`` the float32 bytes. What would change an answer and cannot be served as asked
is refused, never ignored: ``truncate: START``, a ``max_tokens`` below the model's max length,
an input of several parts for a model that embeds texts and images each alone.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from ..compute.requests.asks import Ask, ImageInput, MessageInput, Options, Output
from ..compute.requests.prompts import DEFAULT, PromptChoice
from ..compute.requests.quantize import CALIBRATED, quantized
from ..compute.requests.results import Embeddings
from ..compute.requests.served import ServedModel
from ..errors import InputTooLong, InvalidInput, InvalidOption, TooManyInputs
from .envelope import Call, Endpoint, Measure
from .rerank import best_first
from .schemas.cohere import CohereEmbedRequest, CohereRerankRequest, EmbedInput
from .vectors import encode_rows

API_VERSION = {"version": "2"}
# Cohere's input types that stand for a prompt choice; classification and clustering name a
# prompt of the model's own where it has one.
_INPUT_TYPES = {"search_query": PromptChoice(input_type="query"), "search_document": PromptChoice(input_type="document")}
_NAMED_PROMPTS = ("classification", "clustering")


def answer_id() -> str:
    return uuid.uuid4().hex


def prompt_choice(input_type: str, model: ServedModel) -> PromptChoice:
    if input_type in _INPUT_TYPES:
        return _INPUT_TYPES[input_type]
    if input_type in _NAMED_PROMPTS and input_type in (model.metadata.prompts or {}):
        return PromptChoice(prompt_name=input_type)
    return DEFAULT


def read_inputs(body: CohereEmbedRequest, model: ServedModel) -> list[str | ImageInput | MessageInput]:
    """The request's inputs in order: texts, images as ``ImageInput``, and inputs of several
    parts as ``MessageInput`` (for a model that embeds them together)."""
    given = [name for name in ("texts", "images", "inputs") if getattr(body, name) is not None]
    if len(given) != 1:
        raise InvalidInput("give one of texts, images or inputs, as a non-empty list")
    if body.texts:
        return list(body.texts)
    if body.images:
        return [ImageInput(source) for source in body.images]
    return [_one_part(index, item, model) for index, item in enumerate(body.inputs or ())]


def _one_part(index: int, item: EmbedInput, model: ServedModel) -> str | ImageInput | MessageInput:
    parts = [part.text if part.type == "text" else ImageInput(part.image_url.url) for part in item.content]
    if len(parts) == 1:
        return parts[0]
    if model.kind.joins_parts():
        return MessageInput(tuple(parts))
    raise InvalidOption(
        f"inputs[{index}] has {len(item.content)} parts: model '{model.name}' embeds a text or an image alone, "
        "so each input takes one part", "inputs",
    )


def image_count(inputs: list[str | ImageInput | MessageInput]) -> int:
    """The images among ``inputs``, those inside inputs of parts included."""
    return sum(
        isinstance(value, ImageInput)
        + (sum(isinstance(part, ImageInput) for part in value.parts) if isinstance(value, MessageInput) else 0)
        for value in inputs
    )


class CohereEmbed(Endpoint[CohereEmbedRequest]):
    """``POST /v2/embed`` and a batch job's ``/v2/embed`` lines."""

    body_type = CohereEmbedRequest

    def check(self, body: CohereEmbedRequest, model: ServedModel | None) -> Call:
        model = self.model_by_key(body.model)
        inputs = read_inputs(body, model)
        texts = [value for value in inputs if isinstance(value, str)]
        images = image_count(inputs)
        settings = self.settings
        if len(texts) > settings.max_texts_per_request:
            raise TooManyInputs(f"{len(texts)} texts in one request; the limit is {settings.max_texts_per_request}")
        if images > settings.max_images_per_request:
            raise TooManyInputs(f"{images} images in one request; the limit is {settings.max_images_per_request}")
        if images:
            model.kind.require(Output.IMAGES, model.name, self.elsewhere)
        if body.truncate == "START":
            raise InvalidOption(
                "truncate START is not served: a text past the model's max length is cut at its end, as the model's "
                "tokenizer cuts it ('END'), or refused ('NONE')", "truncate",
            )
        max_length = model.metadata.max_seq_length
        if body.max_tokens is not None and body.max_tokens < max_length:
            raise InvalidOption(
                f"max_tokens below model '{model.name}''s max length ({max_length}) is not served: its texts are cut "
                "at that length, as sentence-transformers cuts them", "max_tokens",
            )
        types = list(dict.fromkeys(body.embedding_types or ["float"]))
        self._check_calibrated(types, model, images, body.output_dimension)
        options = Options(normalize=True, precision="float32", dimensions=body.output_dimension)
        ask = Ask(Output.EMBED, inputs, prompt_choice(body.input_type, model), options)  # type: ignore[arg-type]
        # Charged for every text, those inside inputs of parts too.
        charged = texts + [
            part for value in inputs if isinstance(value, MessageInput) for part in value.parts if isinstance(part, str)
        ]
        return Call(model, (ask,), charged, images=images, context=(body, types, texts))

    @staticmethod
    def _check_calibrated(types: list[str], model: ServedModel, images: int, dimensions: int | None) -> None:
        calibrated = [name for name in types if name in CALIBRATED]
        if not calibrated:
            return
        why = None
        if images:
            why = "image embeddings have no ranges calibrated at conversion"
        elif model.metadata.calibration is None:
            why = f"model '{model.name}' has no ranges calibrated at conversion"
        elif dimensions is not None and dimensions < model.metadata.embedding_dim:
            why = "its ranges are calibrated on the model's full vectors, not on output_dimension of them"
        if why:
            raise InvalidOption(f"embedding_types {', '.join(calibrated)}: {why}; use float, binary or ubinary", "embedding_types")

    def respond(self, call: Call, results: list[Embeddings]) -> dict[str, Any]:
        body, types, texts = call.context
        result = results[0]
        if body.truncate == "NONE" and result.truncated:
            cut = [index for index, row in enumerate(result.truncated_rows or ()) if row]
            raise InputTooLong(
                f"inputs {cut} are longer than model '{call.model.name}''s max length "
                f"({call.model.metadata.max_seq_length} tokens) and truncate is NONE"
            )
        return {
            "id": answer_id(),
            "response_type": "embeddings_by_type",
            "embeddings": {name: self._typed(call.model, result.vectors, name) for name in types},
            "texts": texts,
            "meta": {
                "api_version": API_VERSION,
                "billed_units": {"input_tokens": sum(result.token_counts), "images": call.images},
            },
        }

    @staticmethod
    def _typed(model: ServedModel, vectors: np.ndarray, name: str) -> list:
        if name in ("float", "base64"):
            return encode_rows(vectors, name)  # type: ignore[arg-type]
        return encode_rows(
            quantized(vectors, name, model.metadata.calibration, normalized=True, what="its embeddings"),  # type: ignore[arg-type]
            name,  # type: ignore[arg-type]
        )

    def measure(self, body: dict[str, Any]) -> Measure:
        texts = body.get("texts") if isinstance(body.get("texts"), list) else []
        others = [body.get(name) for name in ("images", "inputs")]
        count = len(texts) + sum(len(value) for value in others if isinstance(value, list))
        lengths = [len(text) for text in texts if isinstance(text, str)]
        model = body.get("model")
        return Measure(model if isinstance(model, str) else "", count, max(lengths, default=0))


class CohereRerank(Endpoint[CohereRerankRequest]):
    """``POST /v2/rerank``: each document's score against the query, best first."""

    def check(self, body: CohereRerankRequest, model: ServedModel | None) -> Call:
        if not body.documents:
            raise InvalidInput("documents must be a non-empty list")
        limit = self.settings.max_texts_per_request
        if len(body.documents) > limit:
            raise TooManyInputs(f"{len(body.documents)} documents in one request; the limit is {limit}")
        model = self.model_by_key(body.model)
        max_length = model.metadata.max_seq_length
        if body.max_tokens_per_doc is not None and body.max_tokens_per_doc < max_length:
            raise InvalidOption(
                f"max_tokens_per_doc below model '{model.name}''s max length ({max_length}) is not served: a pair is "
                "cut at that length, as the model's library cuts it", "max_tokens_per_doc",
            )
        ask = Ask(Output.RERANK, list(body.documents), query=body.query)
        return Call(model, (ask,), [(body.query, document) for document in body.documents], context=body)

    def respond(self, call: Call, results: list[Embeddings]) -> dict[str, Any]:
        scores = results[0].vectors
        order = best_first(scores)[: call.context.top_n]
        return {
            "id": answer_id(),
            "results": [{"index": int(index), "relevance_score": float(scores[index, 0])} for index in order],
            "meta": {"api_version": API_VERSION, "billed_units": {"search_units": 1}},
        }
