"""TEI's API (text-embeddings-inference): what a TEI client sends to its base URL, answered
by the same embedding service as every route.

TEI serves one model per process, so its clients take one base URL per model:
``/tei/<model>`` is any loaded model's (``<model_name>:<pretrained>`` for a CLIP model's
text tower), and ``/tei`` is the default model's (``EMBEDGATE_TEI_MODEL``, else the only
loaded model); where loads on a first request are on, a model in the repository that is not
loaded is loaded by the first request to its base URL (``/health`` does not load it). Under each: ``POST /embed``, ``/embed_sparse``, ``/embed_all``,
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
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import Response

from ...compute.requests.asks import Output
from ...compute.requests.served import ServedModel
from ...endpoints.envelope import Answer, Unloaded
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
from ...endpoints.tei import documented_tei_headers
from ...endpoints.timing import documented_headers
from ...gateway import Gateway
from ..openapi import tei_errors
from ..responses import BINARY_CONTENT, JSONResponse, answered
from ..route_table import EndpointRoute, EndpointRouter, ModelOf
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


# The model of a base URL, found for FastAPI and for the fast path alike (``route_table.ModelOf``):
# where loads on a first request are on, one in the repository not loaded yet (``Unloaded``)
# is loaded by whatever answers the request.
async def default_model(gateway: Gateway = Depends(get_gateway)) -> ServedModel | Unloaded:
    """The model ``/tei`` serves: EMBEDGATE_TEI_MODEL, else the only loaded model."""
    return gateway.endpoints.tei.default_model()


async def named_model(model: ModelKey, gateway: Gateway = Depends(get_gateway)) -> ServedModel | Unloaded:
    """The model ``/tei/<model>`` names."""
    return gateway.endpoints.tei.model_named(model)


# TEI's routes under a base URL, each answered by TEI's endpoint of its name: its body, its
# answer, its summary and what it may answer. First those that run the model:
MODEL_ROUTES = (
    ("embed", TeiEmbedRequest, list[list[float]], "Dense embeddings (TEI)", EMBED),
    ("embed_sparse", TeiEmbedSparseRequest, list[list[SparseValue]], "A sparse encoder's non-zero weights (TEI)",
     INFERENCE),
    ("embed_all", TeiEmbedAllRequest, list[list[list[float]]], "A multi-vector model's token vectors (TEI)", INFERENCE),
    ("similarity", TeiSimilarityRequest, list[float], "Cosine similarities (TEI)", INFERENCE),
    ("rerank", TeiRerankRequest, list[Rank], "Texts ranked against a query (TEI)", INFERENCE),
    ("predict", TeiPredictRequest, PredictResponse, "Label scores (TEI)", INFERENCE),
)
# Then those that run only its tokenizer: no deadline, nothing charged.
TOKEN_ROUTES = (
    ("tokenize", TeiTokenizeRequest, list[list[SimpleToken]], "Tokens (TEI)", TOKENS),
    ("decode", TeiDecodeRequest, list[str], "Texts of token ids (TEI)", TOKENS),
)


# The route each body is, at a base URL (TEI's "/" route): the route of the body's shape.
ROUTE_OF_BODY: dict[type[BaseModel], str] = {body: name for name, body, *_ in MODEL_ROUTES}
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
ROOT_ANSWER = {"anyOf": [_schema(answer) for _, _, answer, *_ in MODEL_ROUTES]}


class BaseUrlConvertor(PathConvertor):
    """A model's name in its base URL (``POST /tei/<model>``): any path but one that ends in
    the name of a route that takes GET, so that ``POST /tei/<model>/info`` is a 405, not a
    model called ``<model>/info``."""

    regex = rf"(?!(?:.*/)?(?:{'|'.join(GET_ROUTES)})$).+"


register_url_convertor("tei_base_url", BaseUrlConvertor())


def tei_router(prefix: str, base_url: str, model_of: ModelOf) -> EndpointRouter:
    """TEI's routes under ``prefix`` and a POST to ``base_url``, each for the model ``model_of`` finds."""
    router = EndpointRouter(tags=["tei"], errors=tei_errors)
    Model = Annotated[ServedModel | Unloaded, Depends(model_of)]
    Served = Annotated[Gateway, Depends(get_gateway)]
    Deadline = Annotated[float, Depends(request_timeout)]

    for routes, runs_model in ((MODEL_ROUTES, True), (TOKEN_ROUTES, False)):
        for name, body, answer, summary, responses in routes:
            router.endpoint_route(EndpointRoute(
                f"{prefix}/{name}", f"tei_{name}" if runs_model else name, body, f"tei.{name}", answer, responses,
                summary=summary, model_of=model_of, runs_model=runs_model,
            ))

    @router.get(f"{prefix}/info", response_model=TeiInfo, responses=tei_errors(404, 409, 422, 500, 503, 504),
                summary="The model (TEI)", openapi_extra=TAKES_A_DEADLINE)
    async def model_info(model: Model, gateway: Served, timeout_s: Deadline) -> JSONResponse:
        async def answer(model: ServedModel, _: float) -> JSONResponse:
            return JSONResponse(info(model, gateway.settings))

        return await gateway.endpoints.tei.for_model(model, timeout_s, answer)

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
        async def answer(model: ServedModel, timeout_s: float) -> Answer:
            name, parsed = root_route(model, body)
            return await getattr(gateway.endpoints.tei, name)(parsed, timeout_s, model)

        return answered(await gateway.endpoints.tei.for_model(model, timeout_s, answer), http.headers.get("accept"))

    return router


def health_router(prefix: str, model_of: ModelOf) -> APIRouter:
    """TEI's ``GET /health``: 200 with no body while Triton is ready and the model loaded (or,
    where loads on a first request are on, in the repository: the next request loads it),
    else 503 (TEI's shape); open, as TEI's is."""
    router = APIRouter(prefix=prefix, tags=["tei"])

    @router.get("/health", response_class=Response, responses={200: {"description": "Healthy."},
                **tei_errors(404, 409, 422, 500, 503)}, summary="The model's health (TEI)")
    async def health(model: Annotated[ServedModel | Unloaded, Depends(model_of)],
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
