"""TEI's API (text-embeddings-inference): what a TEI client sends to its base URL, answered
by the same embedding service as every route.

TEI serves one model per process, so its clients take one base URL per model:
``/tei/<model>`` is any loaded model's (``<model_name>:<pretrained>`` for a CLIP model's
text tower), and ``/tei`` is the default model's (``EMBEDGATE_TEI_MODEL``, else the only
loaded model). Under each: ``POST /embed``, ``/embed_sparse``, ``/embed_all``,
``/similarity``, ``/rerank``, ``/predict``, ``/tokenize``, ``/decode``, ``GET /info`` and
``/health``, and ``POST`` to the base URL itself, which TEI routes by the model's kind
(where huggingface_hub's ``InferenceClient`` sends ``feature_extraction`` and
``sentence_similarity``). The native routes of the same names (``/rerank``, ``/predict``,
``/health``) stay as they are. A path whose last part names a TEI route is that route, so
a model whose name ends in one (``org/embed``) is reached through its routes, not its root.

A request the model's kind does not answer is refused (424, as TEI), never answered as
something else; errors have TEI's shape and statuses (``api/http/tei/errors.py``).
"""

# No ``from __future__ import annotations``: the routes' parameters are typed by the factory's
# locals, which FastAPI could not resolve from strings.
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import Response

from ...compute.requests.asks import Ask, Options, Output
from ...compute.requests.prompts import PromptChoice
from ...compute.requests.results import Embeddings
from ...compute.requests.served import ServedModel
from ...errors import TooManyInputs
from ...gateway import Gateway
from ...telemetry import tag_model
from ..openai.rate_limits import rate_limit_headers
from ..openapi import tei_errors
from ..predict_schemas import PredictResponse
from ..responses import JSONResponse
from ..routing import BodyRoute
from ..tei import answers
from ..tei.errors import PREFIX, Empty, NoDefaultModel, tei_error
from ..tei.info import info
from ..tei.schemas import (
    Rank,
    SimpleToken,
    SparseValue,
    TeiDecodeRequest,
    TeiEmbedAllRequest,
    TeiEmbedRequest,
    TeiEmbedSparseRequest,
    TeiInfo,
    TeiPredictRequest,
    TeiRerankRequest,
    TeiSimilarityRequest,
    TeiTokenizeRequest,
    Truncation,
    non_empty,
)
from ..timing import documented_headers, inference_headers
from . import TAKES_A_DEADLINE, ModelKey, get_gateway, request_timeout, serving_key
from .predict import predictions

# Where a request the model's kind does not answer should go instead, in TEI's API.
TEI_ENDPOINTS = {
    Output.EMBED: "/embed and /similarity",
    Output.SPARSE: "/embed_sparse",
    Output.MULTI_VECTOR: "/embed_all",
    Output.RERANK: "/rerank",
    Output.PREDICT: "/predict",
    Output.IMAGES: "POST /infer_image (TEI's API has no images)",
}
# TEI's routes that take GET: no model's base URL ends in their names.
GET_ROUTES = ("info", "health")
INFERENCE = {
    200: {"headers": {**documented_headers(text_always=True), **answers.documented_tei_headers()}},
    **tei_errors(400, 404, 409, 413, 415, 422, 424, 429, 500, 503, 504),
}
TOKENS = tei_errors(400, 404, 409, 413, 415, 422, 424, 500, 503)


async def default_model(gateway: Gateway = Depends(get_gateway)) -> ServedModel:
    """The model ``/tei`` serves: EMBEDGATE_TEI_MODEL, else the only loaded model."""
    if gateway.settings.tei_model:
        return serving_key(gateway, gateway.settings.tei_model)
    loaded = gateway.registry.loaded()
    if len(loaded) != 1:
        names = ", ".join(sorted(model.name for model in loaded)) or "none"
        raise NoDefaultModel(
            f"/tei serves the default model: EMBEDGATE_TEI_MODEL is not set and {len(loaded)} models are loaded "
            f"({names}); name one in the URL, /tei/<model>"
        )
    tag_model(loaded[0].name)
    return loaded[0]


async def named_model(model: ModelKey, gateway: Gateway = Depends(get_gateway)) -> ServedModel:
    return serving_key(gateway, model)


def _limit(gateway: Gateway, count: int) -> None:
    limit = gateway.settings.max_texts_per_request
    if count > limit:
        raise TooManyInputs(f"batch size {count} > maximum allowed batch size {limit}")


async def _run(
    gateway: Gateway, model: ServedModel, ask: Ask, cuts: Truncation, charged: Sequence, timeout_s: float
) -> tuple[Embeddings, dict[str, str]]:
    """The ask answered (refused if an input had to be cut and the request forbade it), and
    the key's rate-limit headers."""
    model.kind.require(ask.output, model.name, TEI_ENDPOINTS)
    standing = gateway.embeddings.charge(charged)
    result = await gateway.embeddings.answer(model, ask, timeout_s=timeout_s)
    answers.check_cuts(cuts, result, model)
    return result, rate_limit_headers(standing)


def _answer(payload: Any, model: ServedModel, run: tuple[Embeddings, dict[str, str]], started: float,
            characters: int) -> JSONResponse:
    result, headers = run
    total_ms = (time.perf_counter() - started) * 1000
    headers = {**inference_headers(model.name, result, total_ms), **headers,
               **answers.tei_headers(result, total_ms, characters)}
    return JSONResponse(payload, headers=headers)


def _characters(texts: Sequence[str | tuple[str, str]]) -> int:
    return sum(len(text) if isinstance(text, str) else len(text[0]) + len(text[1]) for text in texts)


async def embed(gateway: Gateway, model: ServedModel, body: TeiEmbedRequest, timeout_s: float) -> JSONResponse:
    started = time.perf_counter()
    texts = non_empty(body.inputs)
    _limit(gateway, len(texts))
    run = await _run(gateway, model, answers.embed_ask(body, model), body, texts, timeout_s)
    return _answer(answers.embeddings(body, run[0].vectors), model, run, started, _characters(texts))


async def embed_sparse(
    gateway: Gateway, model: ServedModel, body: TeiEmbedSparseRequest, timeout_s: float
) -> JSONResponse:
    started = time.perf_counter()
    texts = non_empty(body.inputs)
    _limit(gateway, len(texts))
    ask = Ask(Output.SPARSE, texts, PromptChoice(prompt_name=body.prompt_name))
    run = await _run(gateway, model, ask, body, texts, timeout_s)
    return _answer(answers.sparse_values(run[0]), model, run, started, _characters(texts))


async def embed_all(gateway: Gateway, model: ServedModel, body: TeiEmbedAllRequest, timeout_s: float) -> JSONResponse:
    started = time.perf_counter()
    texts = non_empty(body.inputs)
    _limit(gateway, len(texts))
    ask = Ask(Output.MULTI_VECTOR, texts, PromptChoice(prompt_name=body.prompt_name))
    run = await _run(gateway, model, ask, body, texts, timeout_s)
    return _answer(list(run[0].vectors), model, run, started, _characters(texts))


async def similarity(
    gateway: Gateway, model: ServedModel, body: TeiSimilarityRequest, timeout_s: float
) -> JSONResponse:
    started = time.perf_counter()
    options = body.options()
    texts = [*non_empty([body.inputs.source_sentence], "inputs.source_sentence"),
             *non_empty(body.inputs.sentences, "inputs.sentences")]
    _limit(gateway, len(texts) - 1)
    ask = Ask(Output.EMBED, texts, PromptChoice(prompt_name=options.prompt_name), Options(normalize=True))
    run = await _run(gateway, model, ask, options, texts, timeout_s)
    return _answer(answers.similarities(run[0].vectors), model, run, started, _characters(texts))


async def rerank(gateway: Gateway, model: ServedModel, body: TeiRerankRequest, timeout_s: float) -> JSONResponse:
    started = time.perf_counter()
    if not body.texts:
        raise Empty("`texts` cannot be empty")
    _limit(gateway, len(body.texts))
    ask = Ask(Output.RERANK, body.texts, options=Options(raw_scores=body.raw_scores), query=body.query)
    pairs = [(body.query, text) for text in body.texts]
    run = await _run(gateway, model, ask, body, pairs, timeout_s)
    return _answer(answers.ranks(body, run[0].vectors), model, run, started, _characters(pairs))


async def predict(gateway: Gateway, model: ServedModel, body: TeiPredictRequest, timeout_s: float) -> JSONResponse:
    started = time.perf_counter()
    items, batched = body.items()
    if any(item in ("", ("", "")) for item in items):
        raise Empty("`inputs` cannot be empty")
    _limit(gateway, len(items))
    ask = Ask(Output.PREDICT, items, options=Options(raw_scores=body.raw_scores))
    run = await _run(gateway, model, ask, body, items, timeout_s)
    labels = model.kind.labels()
    rows = [predictions(labels, scores) for scores in run[0].vectors]
    return _answer(rows if batched else rows[0], model, run, started, _characters(items))


Handler = Callable[[Gateway, ServedModel, Any, float], Awaitable[JSONResponse]]
# What TEI answers at its base URL, by the model's kind (TEI's "/" route).
AT_ROOT: dict[str, tuple[type[BaseModel], Handler]] = {
    "sentence_transformer": (TeiEmbedRequest, embed),
    "clip": (TeiEmbedRequest, embed),
    "sparse_encoder": (TeiEmbedSparseRequest, embed_sparse),
    "multi_vector_encoder": (TeiEmbedAllRequest, embed_all),
}
ROOT_BODIES = [TeiEmbedRequest, TeiEmbedSparseRequest, TeiEmbedAllRequest, TeiSimilarityRequest, TeiRerankRequest,
               TeiPredictRequest]


def root_route(model: ServedModel, body: Any) -> tuple[type[BaseModel], Handler]:
    """What a POST to the base URL is: a similarity where ``inputs`` is an object
    (``sentence_similarity``), else what TEI routes "/" to for the model's kind."""
    if isinstance(body, dict) and isinstance(body.get("inputs"), dict):
        return TeiSimilarityRequest, similarity
    if model.kind.name == "cross_encoder":
        return (TeiRerankRequest, rerank) if Output.RERANK in model.kind.gives() else (TeiPredictRequest, predict)
    return AT_ROOT[model.kind.name]


REFS = "#/components/schemas/"


def _schema(answer: Any) -> dict[str, Any]:
    """An answer's JSON schema, its models referred to where the document defines them."""
    schema = TypeAdapter(answer).json_schema(ref_template=REFS + "{model}")
    schema.pop("$defs", None)
    return schema


# What the base URL answers: one of the routes' answers.
ROOT_ANSWER = {"anyOf": [_schema(answer) for answer in (
    list[list[float]], list[list[SparseValue]], list[list[list[float]]], list[float], list[Rank], PredictResponse)]}


class BaseUrlConvertor(PathConvertor):
    """A model's name in its base URL (``POST /tei/<model>``): any path but one that ends in
    the name of a route that takes GET, so that ``POST /tei/<model>/info`` is a 405, not a
    model called ``<model>/info``."""

    regex = rf"(?!(?:.*/)?(?:{'|'.join(GET_ROUTES)})$).+"


register_url_convertor("tei_base_url", BaseUrlConvertor())


def tei_router(prefix: str, base_url: str, model_of: Callable[..., Awaitable[ServedModel]]) -> APIRouter:
    """TEI's routes under ``prefix`` and a POST to ``base_url``, each for the model ``model_of`` gives."""
    router = APIRouter(tags=["tei"], route_class=BodyRoute)
    Model = Annotated[ServedModel, Depends(model_of)]
    Served = Annotated[Gateway, Depends(get_gateway)]
    Deadline = Annotated[float, Depends(request_timeout)]

    def inference(path: str, request: type[BaseModel], answer: Any, handler: Handler, summary: str) -> None:
        async def endpoint(
            body: request, model: Model, gateway: Served, timeout_s: Deadline  # type: ignore[valid-type]
        ) -> JSONResponse:
            return await handler(gateway, model, body, timeout_s)

        router.post(path, response_model=answer, responses=INFERENCE, openapi_extra=TAKES_A_DEADLINE,
                    summary=summary, name=f"tei_{handler.__name__}")(endpoint)

    inference(f"{prefix}/embed", TeiEmbedRequest, list[list[float]], embed, "Dense embeddings (TEI)")
    inference(f"{prefix}/embed_sparse", TeiEmbedSparseRequest, list[list[SparseValue]], embed_sparse,
              "A sparse encoder's non-zero weights (TEI)")
    inference(f"{prefix}/embed_all", TeiEmbedAllRequest, list[list[list[float]]], embed_all,
              "A multi-vector model's token vectors (TEI)")
    inference(f"{prefix}/similarity", TeiSimilarityRequest, list[float], similarity, "Cosine similarities (TEI)")
    inference(f"{prefix}/rerank", TeiRerankRequest, list[Rank], rerank, "Texts ranked against a query (TEI)")
    inference(f"{prefix}/predict", TeiPredictRequest, PredictResponse, predict, "Label scores (TEI)")

    @router.post(f"{prefix}/tokenize", response_model=list[list[SimpleToken]], responses=TOKENS,
                 summary="Tokens (TEI)")
    async def tokenize(body: TeiTokenizeRequest, model: Model, gateway: Served) -> JSONResponse:
        texts = non_empty(body.inputs)
        _limit(gateway, len(texts))
        tokens = await gateway.embeddings.tokens.tokenize(
            model, texts, prompt=PromptChoice(prompt_name=body.prompt_name), add_special_tokens=body.add_special_tokens
        )
        return JSONResponse([[asdict(token) for token in row] for row in tokens])

    @router.post(f"{prefix}/decode", response_model=list[str], responses=TOKENS, summary="Texts of token ids (TEI)")
    async def decode(body: TeiDecodeRequest, model: Model, gateway: Served) -> JSONResponse:
        ids, _ = body.batch()
        if not ids or not all(ids):
            raise Empty("`ids` cannot be empty")
        _limit(gateway, len(ids))
        texts = await gateway.embeddings.tokens.decode(model, ids, skip_special_tokens=body.skip_special_tokens)
        return JSONResponse(texts)

    @router.get(f"{prefix}/info", response_model=TeiInfo, responses=tei_errors(404, 409, 422, 500, 503),
                summary="The model (TEI)")
    async def model_info(model: Model, gateway: Served) -> JSONResponse:
        return JSONResponse(info(model, gateway.settings))

    # Last: a POST to another path under the prefix is one to a base URL.
    @router.post(
        base_url,
        responses={**INFERENCE, 200: {**INFERENCE[200], "content": {"application/json": {"schema": ROOT_ANSWER}}}},
        openapi_extra={**TAKES_A_DEADLINE, "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"anyOf": [{"$ref": f"{REFS}{body.__name__}"} for body in ROOT_BODIES]}}}}},
        summary="What TEI answers at its base URL: the route of the model's kind, or /similarity (TEI)",
    )
    async def at_base_url(
        body: Annotated[Any, Body()], model: Model, gateway: Served, timeout_s: Deadline
    ) -> Response:
        request, handler = root_route(model, body)
        try:
            parsed = request.model_validate(body)
        except ValidationError as error:
            raise RequestValidationError(error.errors()) from None
        return await handler(gateway, model, parsed, timeout_s)

    return router


def health_router(prefix: str, model_of: Callable[..., Awaitable[ServedModel]]) -> APIRouter:
    """TEI's ``GET /health``: 200 with no body while the model is loaded and Triton ready,
    else 503 (TEI's shape); open, as TEI's is."""
    router = APIRouter(prefix=prefix, tags=["tei"])

    @router.get("/health", response_class=Response, responses={200: {"description": "Healthy."},
                **tei_errors(404, 409, 422, 500, 503)}, summary="The model's health (TEI)")
    async def health(model: Annotated[ServedModel, Depends(model_of)],
                     gateway: Annotated[Gateway, Depends(get_gateway)]) -> Response:
        if await gateway.triton_ready():
            return Response(status_code=200)
        status, body = tei_error(503, "unhealthy", "unhealthy")
        return JSONResponse(body, status_code=status, headers={"Retry-After": "1"})

    return router


NAMED = f"{PREFIX}/{{model:path}}"
router = tei_router(PREFIX, PREFIX, default_model)
named_router = tei_router(NAMED, f"{PREFIX}/{{model:tei_base_url}}", named_model)
health = health_router(PREFIX, default_model)
named_health = health_router(NAMED, named_model)
