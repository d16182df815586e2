"""Embeddings, as each API asks for them: the native ``/infer`` (texts and, for a CLIP or
multimodal model, images in one request) and ``/infer_image`` (uploaded images), OpenAI's
``/v1/embeddings`` (and a batch job's lines of it), TEI's ``/embed``, ``/embed_sparse`` and
``/embed_all``. Texts get what the model's kind gives for them (its ``text_output``):
dense, sparse or multi-vector embeddings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..compute.requests.asks import Ask, Options, Output
from ..compute.requests.prompts import DEFAULT, PromptChoice
from ..compute.requests.quantize import PRECISIONS, Precision
from ..compute.requests.results import Embeddings
from ..compute.requests.served import ServedModel
from ..errors import BodyTooLarge, InvalidInput, InvalidOption, TooManyInputs
from .envelope import Answer, Call, Endpoint, Measure
from .schemas.chunking import ChunkingField
from .schemas.native import InferRequest
from .schemas.openai import EmbeddingsRequest
from .schemas.tei import TeiEmbedAllRequest, TeiEmbedRequest, TeiEmbedSparseRequest, non_empty
from .tei import TeiEndpoint
from .timing import IMAGE_INFERENCE_HEADER, IMAGE_LOAD_HEADER, TOTAL_HEADER, inference_headers
from .vectors import encode_rows

# Each text output's key in the native answer, and its rows as JSON values.
ANSWER_KEYS: dict[Output, tuple[str, Callable[[Embeddings], Any]]] = {
    Output.EMBED: ("text_embeddings", lambda text: text.vectors),
    Output.SPARSE: (
        "sparse_embeddings",
        lambda text: [{"indices": row.indices, "values": row.values} for row in text.sparse or ()],
    ),
    Output.MULTI_VECTOR: ("multi_vector_embeddings", lambda text: list(text.vectors)),
}


def check_count(items: list | None, limit: int, what: str) -> None:
    if items is not None and len(items) > limit:
        raise TooManyInputs(f"{len(items)} {what} in one request; the limit is {limit}")


def chunking_of(field: ChunkingField | None, texts: list[str], limit: int):
    """A request's chunking, its texts' size checked against ``limit`` characters."""
    if field is None:
        return None
    if field.overlap >= field.max_tokens:
        raise InvalidOption(
            f"chunking.overlap ({field.overlap}) must be less than chunking.max_tokens ({field.max_tokens})", "chunking"
        )
    size = sum(len(text) for text in texts)
    if size > limit:
        raise BodyTooLarge(
            f"the texts to chunk have {size} characters; the limit is {limit} (EMBEDGATE_MAX_CHUNKED_CHARACTERS)"
        )
    return field.chunking()


def chunk_rows(result: Embeddings, rows: list) -> list[list[tuple]]:
    """Each input's chunks as (chunk, its row of ``rows``), in order."""
    assert result.chunks is not None
    rows_of = iter(rows)
    return [[(chunk, next(rows_of)) for chunk in chunks] for chunks in result.chunks]


class Infer(Endpoint[InferRequest]):
    """``POST /infer``: texts, images or both (a CLIP or multimodal model's text and image
    graphs side by side, one slot of the model's in-flight limit for the whole request)."""

    def check(self, body: InferRequest, model: ServedModel | None) -> Call:
        if not body.text and not body.image:
            raise InvalidInput(
                "text must be a string or a non-empty list of strings (or, for a CLIP or multimodal model, give image)"
            )
        if body.prompt_name is not None and body.prompt is not None:
            raise InvalidInput("give prompt_name or prompt, not both")
        settings = self.settings
        check_count(body.text, settings.max_texts_per_request, "texts")
        check_count(body.image, settings.max_images_per_request, "images")
        model = self.model(body.model_name, body.pretrained)
        asks: list[Ask] = []
        prompt = PromptChoice(prompt_name=body.prompt_name, prompt=body.prompt, task=body.task)
        if body.text:
            # A kind that gives nothing for texts is refused, saying where to go instead.
            output = model.kind.text_output or Output.EMBED
            options = Options(
                normalize=body.normalize,
                normalize_given="normalize" in body.model_fields_set,
                precision=body.precision,
                top_k=body.top_k,
            )
            chunking = chunking_of(body.chunking, body.text, settings.max_chunked_characters)
            asks.append(Ask(output, body.text, prompt, options, chunking=chunking))
        if body.image:
            asks.append(images_ask(body.image, body.normalize, body.precision, prompt))
        return Call(model, tuple(asks), body.text or (), len(body.image or ()))

    def respond(self, call: Call, results: list[Embeddings]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        for ask, result in zip(call.asks, results):
            if ask.output is Output.IMAGES:
                body["image_embeddings"] = result.vectors
            elif result.chunks is not None:
                body["text_chunks"] = [
                    [{"start": chunk.start, "end": chunk.end, "tokens": chunk.tokens, "embedding": row} for chunk, row in mine]
                    for mine in chunk_rows(result, list(result.vectors))
                ]
            else:
                key, rows = ANSWER_KEYS[ask.output]
                body[key] = rows(result)
        return body

    def headers(self, call: Call, results: list[Embeddings], total_ms: float) -> dict[str, str]:
        headers = {TOTAL_HEADER: f"{total_ms:.2f}"}
        for ask, result in zip(call.asks, results):
            if ask.output is Output.IMAGES:
                headers[IMAGE_LOAD_HEADER] = f"{result.tokenize_ms:.2f}"
                headers[IMAGE_INFERENCE_HEADER] = f"{result.inference_ms:.2f}"
            else:
                headers.update(inference_headers(call.model.name, result, total_ms))
        return headers

    def finished(self, answer: Answer) -> Answer:
        answer.body["processingTimeMs"] = round(answer.total_ms, 3)
        return answer

    binary = True

    def array_of(self, call: Call, results: list[Embeddings]) -> Any:
        # Dense embeddings of texts, or of images: one array (texts and images, two; chunks, JSON).
        if len(call.asks) == 1 and call.asks[0].output in (Output.EMBED, Output.IMAGES) and results[0].chunks is None:
            return results[0].vectors
        return None


def images_ask(images: list, normalize: bool, precision: Precision, prompt: PromptChoice = DEFAULT) -> Ask:
    """Images to embed; ``prompt``: the request's, which a vision-language model renders with
    each image (as the library's system message); a CLIP-form model's images take none."""
    return Ask(Output.IMAGES, list(images), prompt, Options(normalize=normalize, precision=precision))


@dataclass(frozen=True)
class Uploads:
    """``POST /infer_image``'s form, read: the model, the uploaded images' bytes, the options."""

    model_name: str
    # A CLIP model's; None for a multimodal sentence-transformer.
    pretrained: str | None
    images: list[bytes]
    normalize: bool
    precision: Precision


class InferUploads(Infer):
    """``POST /infer_image``: images uploaded as files, through a CLIP model's image tower
    or a multimodal model's image graph, answered as ``/infer`` answers images."""

    def check(self, body: Uploads, model: ServedModel | None) -> Call:  # type: ignore[override]
        check_count(body.images, self.settings.max_images_per_request, "images")
        model = self.model(body.model_name, body.pretrained)
        return Call(model, (images_ask(body.images, body.normalize, body.precision),), images=len(body.images))


# encoding_format values that are a precision of their own (float and base64 are float32).
QUANTIZED = {name: name for name in PRECISIONS if name != "float32"}


class OpenAIEmbed(Endpoint[EmbeddingsRequest]):
    """``POST /v1/embeddings`` and a batch job's ``/v1/embeddings`` lines: unit-length
    embeddings (as OpenAI's), each input with its input_type's prompt, through its
    input_type's route, in the encoding asked for."""

    body_type = EmbeddingsRequest

    def check(self, body: EmbeddingsRequest, model: ServedModel | None) -> Call:
        if not body.input:
            raise InvalidOption("input must be a string or a non-empty list of strings", "input")
        model = self.model_by_key(body.model)
        limit = self.settings.max_texts_per_request
        if len(body.input) > limit:
            raise TooManyInputs(f"{len(body.input)} inputs in one request; the limit is {limit}")
        precision = QUANTIZED.get(body.encoding_format, "float32")
        options = Options(normalize=True, precision=precision, dimensions=body.dimensions)
        chunking = chunking_of(body.chunking, body.input, self.settings.max_chunked_characters)
        ask = Ask(Output.EMBED, body.input, PromptChoice(input_type=body.input_type), options, chunking=chunking)
        return Call(model, (ask,), body.input, context=body)

    def respond(self, call: Call, results: list[Embeddings]) -> dict[str, Any]:
        result = results[0]
        # Tokens the model saw, its prompt's included: counted by its own tokenizer, after truncation.
        tokens = sum(result.token_counts)
        rows = encode_rows(result.vectors, call.context.encoding_format)
        if result.chunks is None:
            data = [{"object": "embedding", "index": index, "embedding": row} for index, row in enumerate(rows)]
        else:
            # One item per chunk, numbered among all of them, saying whose it is and where.
            chunks = [(owner, chunk, row) for owner, mine in enumerate(chunk_rows(result, rows)) for chunk, row in mine]
            data = [
                {"object": "embedding", "index": index, "embedding": row, "input_index": owner,
                 "start": chunk.start, "end": chunk.end, "tokens": chunk.tokens}
                for index, (owner, chunk, row) in enumerate(chunks)
            ]
        return {
            "object": "list",
            "data": data,
            "model": call.model.name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def measure(self, body: dict[str, Any]) -> Measure:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, list) else []
        lengths = [len(text) for text in texts if isinstance(text, str)]
        model = body.get("model")
        return Measure(model if isinstance(model, str) else "", len(texts), max(lengths, default=0))


class TeiEmbed(TeiEndpoint[TeiEmbedRequest]):
    """TEI's ``/embed``: dense embeddings, the first ``dimensions`` of them, unit length if asked."""

    def check(self, body: TeiEmbedRequest, model: ServedModel | None) -> Call:
        assert model is not None
        texts = non_empty(body.inputs)
        self.limit(len(texts))
        options = Options(normalize=body.normalize, normalize_given=True, dimensions=body.dimensions)
        ask = Ask(Output.EMBED, texts, PromptChoice(prompt_name=body.prompt_name), options)
        return Call(model, (ask,), texts, context=body)

    def answer(self, call: Call, result: Embeddings) -> Any:
        return result.vectors

    binary = True

    def array_of(self, call: Call, results: list[Embeddings]) -> Any:
        return results[0].vectors


class TeiEmbedSparse(TeiEndpoint[TeiEmbedSparseRequest]):
    """TEI's ``/embed_sparse``: each input's non-zero weights, by ascending index."""

    def check(self, body: TeiEmbedSparseRequest, model: ServedModel | None) -> Call:
        assert model is not None
        texts = non_empty(body.inputs)
        self.limit(len(texts))
        return Call(model, (Ask(Output.SPARSE, texts, PromptChoice(prompt_name=body.prompt_name)),), texts, context=body)

    def answer(self, call: Call, result: Embeddings) -> Any:
        return [
            [{"index": index, "value": value} for index, value in zip(row.indices.tolist(), row.values.tolist())]
            for row in result.sparse or ()
        ]


class TeiEmbedAll(TeiEndpoint[TeiEmbedAllRequest]):
    """TEI's ``/embed_all``: a multi-vector model's token vectors."""

    def check(self, body: TeiEmbedAllRequest, model: ServedModel | None) -> Call:
        assert model is not None
        texts = non_empty(body.inputs)
        self.limit(len(texts))
        ask = Ask(Output.MULTI_VECTOR, texts, PromptChoice(prompt_name=body.prompt_name))
        return Call(model, (ask,), texts, context=body)

    def answer(self, call: Call, result: Embeddings) -> Any:
        return list(result.vectors)
