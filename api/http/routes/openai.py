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
from typing import Annotated

from fastapi import APIRouter, Depends, Path

from ...compute.prompts import PromptChoice
from ...compute.quantize import CALIBRATED, PRECISIONS, quantize
from ...compute.served import ServedModel
from ...errors import InvalidInput, TooManyInputs
from ...gateway import Gateway
from ...models.names import split_clip_key
from .. import patterns
from ..openai.schemas import EmbeddingsRequest, EmbeddingsResponse, Model, ModelsResponse
from ..openai.vectors import encode_rows, shorten
from ..openapi import openai_errors
from ..responses import JSONResponse
from ..routing import BodyRoute
from ..timing import documented_headers, inference_headers
from . import TAKES_A_DEADLINE, get_gateway, request_timeout, serving

router = APIRouter(prefix="/v1", tags=["openai"], route_class=BodyRoute)

OWNER = "embedgate"
# encoding_format values that are a precision of their own (float and base64 are float32).
QUANTIZED = {name: name for name in PRECISIONS if name != "float32"}
# Like /infer, the answer is built by hand and response_model only documents it.
EMBEDDINGS_ANSWERS = {
    200: {"headers": documented_headers(text_always=True)},
    **openai_errors(400, 404, 409, 413, 415, 500, 502, 503, 504),
}


class InvalidParameter(InvalidInput):
    """A bad value for one request parameter; OpenAI's error shape names it in ``param``."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


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
    limit = gateway.settings.max_texts_per_request
    if len(body.input) > limit:
        raise TooManyInputs(f"{len(body.input)} inputs in one request; the limit is {limit}")
    model = _served(gateway, body.model)
    full = model.metadata.embedding_dim
    if body.dimensions is not None and body.dimensions > full:
        raise InvalidParameter(
            f"dimensions must be at most {full} for model '{model.name}'", "dimensions"
        )
    precision = QUANTIZED.get(body.encoding_format, "float32")
    shortened = body.dimensions is not None and body.dimensions < full
    if shortened and precision in CALIBRATED:
        raise InvalidParameter(
            f"dimensions with {precision}: its ranges are calibrated on the model's full vectors", "dimensions"
        )
    result = await gateway.embeddings.embed_texts(
        model,
        body.input,
        normalize=True,
        timeout_s=timeout_s,
        prompt=PromptChoice(input_type=body.input_type),
        precision="float32" if shortened else precision,
    )
    vectors = result.vectors
    if shortened:
        vectors = quantize(shorten(vectors, body.dimensions), precision)
    # Tokens the model saw, its prompt's included: counted by its own tokenizer, after truncation.
    tokens = sum(result.token_counts)
    payload = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": row}
            for index, row in enumerate(encode_rows(vectors, body.encoding_format))
        ],
        "model": model.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    total_ms = (time.perf_counter() - started) * 1000
    return JSONResponse(payload, headers=inference_headers(model.name, result, total_ms))


def _served(gateway: Gateway, model: str) -> ServedModel:
    """OpenAI names a model with one string; a CLIP model is ``<model_name>:<pretrained>``,
    as ``/v1/models`` lists it, and answers with its text encoder."""
    clip = split_clip_key(model)
    return serving(gateway, *clip) if clip else serving(gateway, model)


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
async def retrieve_model(
    # The name is checked where every name is (a 400 here); the pattern documents it.
    model: Annotated[
        str,
        Path(
            min_length=1,
            max_length=200,
            examples=["sentence-transformers/all-MiniLM-L6-v2"],
            json_schema_extra={"pattern": patterns.OPENAI_MODEL},
        ),
    ],
    gateway: Gateway = Depends(get_gateway),
) -> Model:
    return _model(_served(gateway, model))
