"""OpenAI-compatible routes: ``POST /v1/embeddings``, ``GET /v1/models`` and
``GET /v1/models/{model}``.

An OpenAI client pointed at ``http://<host>:8686/v1`` works unchanged. Errors here have
OpenAI's shape (``api.errors`` picks it by path). The model is found through the registry
and its text embedded by the same ``EmbeddingService`` as ``/infer`` (a CLIP model's text
encoder for a CLIP model), so the vectors are the same, always unit length as OpenAI's.
"""

from __future__ import annotations

import time
from datetime import datetime

from fastapi import APIRouter, Depends

from ...compute.requests.served import ServedModel
from ...gateway import Gateway
from ..openai import embeddings
from ..openai.embeddings import InvalidParameter
from ..openai.rate_limits import rate_limit_headers
from ..openai.schemas import EmbeddingsRequest, EmbeddingsResponse, Model, ModelsResponse
from ..openapi import openai_errors
from ..responses import JSONResponse
from ..routing import BodyRoute
from ..timing import documented_headers, inference_headers
from . import TAKES_A_DEADLINE, ModelKey, get_gateway, request_timeout, serving_key

router = APIRouter(prefix="/v1", tags=["openai"], route_class=BodyRoute)

OWNER = "embedgate"
# Like /infer, the answer is built by hand and response_model only documents it.
EMBEDDINGS_ANSWERS = {
    200: {"headers": documented_headers(text_always=True)},
    **openai_errors(400, 404, 409, 413, 415, 429, 500, 502, 503, 504),
}


@router.post(
    "/embeddings", response_model=EmbeddingsResponse, responses=EMBEDDINGS_ANSWERS, openapi_extra=TAKES_A_DEADLINE
)
async def create_embeddings(
    body: EmbeddingsRequest,
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> JSONResponse:
    started = time.perf_counter()
    if not body.input:
        raise InvalidParameter("input must be a string or a non-empty list of strings", "input")
    plan = embeddings.check(body, serving_key(gateway, body.model), gateway.settings.max_texts_per_request)
    standing = gateway.embeddings.charge(body.input)
    result = await gateway.embeddings.answer(plan.model, embeddings.ask(plan), timeout_s=timeout_s)
    payload = embeddings.answer(plan, result.vectors, result.token_counts)
    total_ms = (time.perf_counter() - started) * 1000
    headers = inference_headers(plan.model.name, result, total_ms)
    headers.update(rate_limit_headers(standing))
    return JSONResponse(payload, headers=headers)


def _created(timestamp: str) -> int:
    try:
        return int(datetime.fromisoformat(timestamp).timestamp())
    except ValueError:
        return 0


def _model(model: ServedModel) -> Model:
    metadata = model.metadata
    return Model(
        id=model.name,
        created=_created(metadata.created_at),
        owned_by=OWNER,
        prompts=metadata.prompts,
        default_prompt_name=metadata.default_prompt_name,
    )


@router.get("/models", response_model=ModelsResponse, responses=openai_errors(500, 503))
async def list_models(gateway: Gateway = Depends(get_gateway)) -> ModelsResponse:
    """The loaded models: the ones ``/v1/embeddings`` can use now."""
    models = sorted(gateway.registry.loaded(), key=lambda m: m.name)
    return ModelsResponse(data=[_model(m) for m in models])


@router.get("/models/{model:path}", response_model=Model, responses=openai_errors(400, 404, 409, 500, 503))
async def retrieve_model(model: ModelKey, gateway: Gateway = Depends(get_gateway)) -> Model:
    return _model(serving_key(gateway, model))
