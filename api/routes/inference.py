"""POST /infer: text embeddings in the seed's shape."""

import time

from fastapi import APIRouter, Depends

from ..errors import BadRequest, TooManyInputs
from ..gateway import Gateway
from ..responses import JSONResponse
from ..schemas import InferRequest, InferResponse
from . import ERRORS, get_gateway

router = APIRouter(tags=["inference"])


@router.post("/infer", response_model=InferResponse, responses=ERRORS)
async def infer(body: InferRequest, gateway: Gateway = Depends(get_gateway)) -> JSONResponse:
    started = time.perf_counter()
    if not body.text:
        raise BadRequest("text must be a string or a non-empty list of strings")
    limit = gateway.settings.max_texts_per_request
    if len(body.text) > limit:
        raise TooManyInputs(f"{len(body.text)} texts in one request; the limit is {limit}")
    model = gateway.registry.served(body.model_name)
    result = await gateway.embeddings.embed_texts(
        model, body.text, normalize=body.normalize, timeout_s=gateway.settings.request_timeout_s
    )
    total_ms = (time.perf_counter() - started) * 1000
    headers = {
        "x-tokenize-time-ms": f"{result.tokenize_ms:.2f}",
        "x-inference-time-ms": f"{result.inference_ms:.2f}",
        "x-total-time-ms": f"{total_ms:.2f}",
        "x-truncated-inputs": str(result.truncated),
    }
    return JSONResponse(
        {"text_embeddings": result.vectors, "processingTimeMs": round(total_ms, 3)},
        headers=headers,
    )
