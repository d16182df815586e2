"""``POST /rerank`` and ``POST /v1/rerank``: a relevance score for a query and each document,
best first: a cross-encoder's, as ``CrossEncoder.rank`` orders them, or a multi-vector
model's MaxSim of the query's token vectors against each document's. The texts go through
the same batching as every text (merged with other requests', or sent in length-sorted
chunks); ``/v1/rerank`` answers errors in OpenAI's shape like the other ``/v1`` routes."""

from __future__ import annotations

import time

import numpy as np
from fastapi import APIRouter, Depends

from ...compute.requests.asks import Ask, Output
from ...compute.requests.prompts import PromptChoice
from ...errors import InvalidInput, TooManyInputs
from ...gateway import Gateway
from ..openai.rate_limits import rate_limit_headers
from ..openapi import errors, openai_errors
from ..rerank_schemas import RerankRequest, RerankResponse
from ..responses import JSONResponse
from ..routing import BodyRoute
from ..timing import documented_headers, inference_headers
from . import TAKES_A_DEADLINE, get_gateway, request_timeout, serving

router = APIRouter(tags=["rerank"], route_class=BodyRoute)
v1_router = APIRouter(prefix="/v1", tags=["rerank"], route_class=BodyRoute)
STATUSES = (400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504)
ANSWER = {200: {"headers": documented_headers(text_always=True)}}


def answer(body: RerankRequest, model: str, scores: np.ndarray, token_counts: list[int]) -> dict:
    """The answer's body, from each pair's scores ([documents, 1]): best first (equal scores
    keep the documents' order), at most ``top_n``; also a batch job's rerank lines' answer."""
    scores = scores[:, 0]
    order = np.argsort(-scores, kind="stable")[: body.top_n]
    results = [
        {
            "index": int(index),
            "relevance_score": float(scores[index]),
            **({"document": {"text": body.documents[index]}} if body.return_documents else {}),
        }
        for index in order
    ]
    return {"model": model, "results": results, "usage": {"total_tokens": sum(token_counts)}}


def ask(body: RerankRequest) -> Ask:
    """What a rerank request asks of its model; also a batch job's rerank lines'."""
    prompt = PromptChoice(prompt_name=body.prompt_name, prompt=body.prompt)
    return Ask(Output.RERANK, body.documents, prompt, query=body.query)


def check(body: RerankRequest, max_documents: int) -> None:
    if not body.documents:
        raise InvalidInput("documents must be a non-empty list")
    if body.prompt_name is not None and body.prompt is not None:
        raise InvalidInput("give prompt_name or prompt, not both")
    if len(body.documents) > max_documents:
        raise TooManyInputs(f"{len(body.documents)} documents in one request; the limit is {max_documents}")


async def rerank(
    body: RerankRequest,
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> JSONResponse:
    started = time.perf_counter()
    check(body, gateway.settings.max_texts_per_request)
    model = serving(gateway, body.model)
    standing = gateway.embeddings.charge([(body.query, document) for document in body.documents])
    result = await gateway.embeddings.answer(model, ask(body), timeout_s=timeout_s)
    payload = answer(body, model.name, result.vectors, result.token_counts)
    total_ms = (time.perf_counter() - started) * 1000
    headers = inference_headers(model.name, result, total_ms)
    headers.update(rate_limit_headers(standing))
    return JSONResponse(payload, headers=headers)


router.post(
    "/rerank", response_model=RerankResponse, responses={**ANSWER, **errors(*STATUSES)}, openapi_extra=TAKES_A_DEADLINE
)(rerank)
v1_router.post(
    "/rerank",
    response_model=RerankResponse,
    responses={**ANSWER, **openai_errors(*STATUSES)},
    openapi_extra=TAKES_A_DEADLINE,
)(rerank)
