"""OpenAI-compatible routes: ``POST /v1/embeddings``, ``GET /v1/models`` and
``GET /v1/models/{model}``.

An OpenAI client pointed at ``http://<host>:8686/v1`` works unchanged. Errors here have
OpenAI's shape (``http/errors.py`` picks it by path). Embeddings are answered by their
endpoint (``endpoints/embed.py``), through the same embedding service as ``/infer`` (a CLIP
model's text encoder for a CLIP model), so the vectors are the same, always unit length
as OpenAI's.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import Depends

from ...compute.requests.served import ServedModel
from ...endpoints.envelope import served_by_key
from ...endpoints.schemas.openai import EmbeddingsRequest, EmbeddingsResponse, Model, ModelsResponse
from ...endpoints.timing import documented_headers
from ...gateway import Gateway
from ..openapi import openai_errors
from ..route_table import EndpointRoute, EndpointRouter
from . import ModelKey, get_gateway

router = EndpointRouter(prefix="/v1", tags=["openai"], errors=openai_errors)

OWNER = "embedgate"
# Like /infer, the answer is built by hand and response_model only documents it.
EMBEDDINGS_ANSWERS = {
    200: {"headers": documented_headers(text_always=True)},
    **openai_errors(400, 404, 409, 413, 415, 429, 500, 502, 503, 504),
}


router.endpoint_route(
    EndpointRoute(
        "/embeddings", "create_embeddings", EmbeddingsRequest, "embeddings", EmbeddingsResponse, EMBEDDINGS_ANSWERS
    )
)


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
    return _model(served_by_key(gateway.registry, model))
