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
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import Response

from ...compute.requests.asks import Output
from ...compute.requests.served import ServedModel
from ...endpoints import TeiEndpoints
from ...endpoints.envelope import Endpoint, served_by_key
from ...endpoints.schemas.predict import PredictResponse
from ...endpoints.schemas.tei import (
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
)
from ...endpoints.tei import default_model as tei_default_model
from ...endpoints.tei import documented_tei_headers
from ...endpoints.timing import documented_headers
from ...gateway import Gateway
from ..lane import Lane
from ..openapi import tei_errors
from ..responses import BINARY_CONTENT, JSONResponse, answered
from ..routing import BodyRoute
from ..tei.errors import PREFIX, tei_error
from ..tei.info import info
from . import TAKES_A_DEADLINE, ModelKey, get_gateway, request_timeout

# TEI's routes that take GET: no model's base URL ends in their names.
GET_ROUTES = ("info", "health")
INFERENCE = {
    200: {"headers": {**documented_headers(text_always=True), **documented_tei_headers()}},
    **tei_errors(400, 404, 409, 413, 415, 422, 424, 429, 500, 503, 504),
}
# /embed (and a base URL, which may be it) answers one array: binary forms too, by Accept.
EMBED = {**INFERENCE, 200: {**INFERENCE[200], "content": BINARY_CONTENT}, **tei_errors(406)}
TOKENS = tei_errors(400, 404, 409, 413, 415, 422, 424, 500, 503)


async def default_model(gateway: Gateway = Depends(get_gateway)) -> ServedModel:
    """The model ``/tei`` serves: EMBEDGATE_TEI_MODEL, else the only loaded model."""
    return tei_default_model(gateway.registry, gateway.settings)


async def named_model(model: ModelKey, gateway: Gateway = Depends(get_gateway)) -> ServedModel:
    return served_by_key(gateway.registry, model)


# The route each body is, at a base URL (TEI's "/" route): the route of the body's shape.
ROUTE_OF_BODY: dict[type[BaseModel], str] = {
    TeiEmbedRequest: "embed",
    TeiEmbedSparseRequest: "embed_sparse",
    TeiEmbedAllRequest: "embed_all",
    TeiSimilarityRequest: "similarity",
    TeiRerankRequest: "rerank",
    TeiPredictRequest: "predict",
}
# What TEI answers at its base URL for a model, by what the model is for.
BODY_OF_OUTPUT: dict[Output, type[BaseModel]] = {
    Output.EMBED: TeiEmbedRequest,
    Output.SPARSE: TeiEmbedSparseRequest,
    Output.MULTI_VECTOR: TeiEmbedAllRequest,
    Output.RERANK: TeiRerankRequest,
    Output.PREDICT: TeiPredictRequest,
}
ROOT_BODIES = list(ROUTE_OF_BODY)


def root_route(model: ServedModel, body: Any) -> tuple[str, BaseModel]:
    """What a POST to the base URL is: a similarity where ``inputs`` is an object
    (``sentence_similarity``), else what TEI routes "/" to for what the model is for; a
    body of another of TEI's routes is that route (which answers 424 where the model's
    kind does not answer it), so every body the document allows is taken."""
    if isinstance(body, dict) and isinstance(body.get("inputs"), dict):
        candidates = [TeiSimilarityRequest]
    else:
        own = BODY_OF_OUTPUT[model.kind.main_output()]
        candidates = [own, *(other for other in ROOT_BODIES if other is not own)]
    first_error = None
    for request in candidates:
        try:
            return ROUTE_OF_BODY[request], request.model_validate(body)
        except ValidationError as error:
            first_error = first_error or error
    assert first_error is not None
    raise RequestValidationError(first_error.errors()) from None


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


def tei_router(
    prefix: str, base_url: str, model_of: Callable[..., Awaitable[ServedModel]],
    lane_model: Callable[[Gateway, dict[str, Any]], ServedModel],
) -> APIRouter:
    """TEI's routes under ``prefix`` and a POST to ``base_url``, each for the model ``model_of``
    gives (``lane_model``: the same, for the fast lane, from the gateway and the path's parameters)."""
    router = APIRouter(tags=["tei"], route_class=BodyRoute)
    Model = Annotated[ServedModel, Depends(model_of)]
    Served = Annotated[Gateway, Depends(get_gateway)]
    Deadline = Annotated[float, Depends(request_timeout)]

    def endpoint_of(gateway: Gateway, route: str) -> Endpoint:
        tei: TeiEndpoints = gateway.endpoints.tei
        return getattr(tei, route)

    def route(path: str, request: type[BaseModel], answer: Any, name: str, summary: str, responses: dict) -> None:
        inference = responses is INFERENCE or responses is EMBED
        if inference:
            async def endpoint(
                http: Request, body: request, model: Model, gateway: Served, timeout_s: Deadline  # type: ignore[valid-type]
            ) -> Response:
                answer = await endpoint_of(gateway, name)(body, timeout_s, model)
                return answered(answer, http.headers.get("accept"))
        else:  # no model runs: no deadline
            async def endpoint(body: request, model: Model, gateway: Served) -> JSONResponse:  # type: ignore[valid-type,misc]
                answered = await endpoint_of(gateway, name)(body, 0.0, model)
                return JSONResponse(answered.body, headers=answered.headers)

        if inference:
            endpoint.lane = Lane(request, lambda endpoints: getattr(endpoints.tei, name), lane_model)  # type: ignore[attr-defined]
        router.post(path, response_model=answer, responses=responses, openapi_extra=TAKES_A_DEADLINE if inference else None,
                    summary=summary, name=f"tei_{name}" if inference else name)(endpoint)

    route(f"{prefix}/embed", TeiEmbedRequest, list[list[float]], "embed", "Dense embeddings (TEI)", EMBED)
    route(f"{prefix}/embed_sparse", TeiEmbedSparseRequest, list[list[SparseValue]], "embed_sparse",
          "A sparse encoder's non-zero weights (TEI)", INFERENCE)
    route(f"{prefix}/embed_all", TeiEmbedAllRequest, list[list[list[float]]], "embed_all",
          "A multi-vector model's token vectors (TEI)", INFERENCE)
    route(f"{prefix}/similarity", TeiSimilarityRequest, list[float], "similarity", "Cosine similarities (TEI)",
          INFERENCE)
    route(f"{prefix}/rerank", TeiRerankRequest, list[Rank], "rerank", "Texts ranked against a query (TEI)", INFERENCE)
    route(f"{prefix}/predict", TeiPredictRequest, PredictResponse, "predict", "Label scores (TEI)", INFERENCE)
    route(f"{prefix}/tokenize", TeiTokenizeRequest, list[list[SimpleToken]], "tokenize", "Tokens (TEI)", TOKENS)
    route(f"{prefix}/decode", TeiDecodeRequest, list[str], "decode", "Texts of token ids (TEI)", TOKENS)

    @router.get(f"{prefix}/info", response_model=TeiInfo, responses=tei_errors(404, 409, 422, 500, 503),
                summary="The model (TEI)")
    async def model_info(model: Model, gateway: Served) -> JSONResponse:
        return JSONResponse(info(model, gateway.settings))

    # Last: a POST to another path under the prefix is one to a base URL.
    @router.post(
        base_url,
        responses={**EMBED, 200: {**INFERENCE[200], "content": {"application/json": {"schema": ROOT_ANSWER},
                                                                  **BINARY_CONTENT}}},
        openapi_extra={**TAKES_A_DEADLINE, "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"anyOf": [{"$ref": f"{REFS}{body.__name__}"} for body in ROOT_BODIES]}}}}},
        summary="What TEI answers at its base URL: the route of the model's kind, or of the body's shape (TEI)",
    )
    async def at_base_url(
        http: Request, body: Annotated[Any, Body()], model: Model, gateway: Served, timeout_s: Deadline
    ) -> Response:
        name, parsed = root_route(model, body)
        answer = await endpoint_of(gateway, name)(parsed, timeout_s, model)
        return answered(answer, http.headers.get("accept"))

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
router = tei_router(
    PREFIX, PREFIX, default_model, lambda gateway, params: tei_default_model(gateway.registry, gateway.settings)
)
named_router = tei_router(
    NAMED, f"{PREFIX}/{{model:tei_base_url}}", named_model,
    lambda gateway, params: served_by_key(gateway.registry, params["model"]),
)
health = health_router(PREFIX, default_model)
named_health = health_router(NAMED, named_model)
