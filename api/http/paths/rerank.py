"""``POST /rerank`` and ``POST /v1/rerank``: a relevance score for a query and each document,
best first, answered by their endpoint (``endpoints/rerank.py``); ``/v1/rerank`` answers
errors in OpenAI's shape like the other ``/v1`` routes."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from ...endpoints.schemas.rerank import RerankRequest, RerankResponse
from ...endpoints.timing import documented_headers
from ...gateway import Gateway
from ..openapi import errors, openai_errors
from ..responses import JSONResponse
from ..routing import BodyRoute
from . import TAKES_A_DEADLINE, get_gateway, request_timeout

router = APIRouter(tags=["rerank"], route_class=BodyRoute)
v1_router = APIRouter(prefix="/v1", tags=["rerank"], route_class=BodyRoute)
STATUSES = (400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504)
ANSWER = {200: {"headers": documented_headers(text_always=True)}}


async def rerank(
    body: RerankRequest,
    gateway: Gateway = Depends(get_gateway),
    timeout_s: float = Depends(request_timeout),
) -> JSONResponse:
    answer = await gateway.endpoints.rerank(body, timeout_s)
    return JSONResponse(answer.body, headers=answer.headers)


router.post(
    "/rerank", response_model=RerankResponse, responses={**ANSWER, **errors(*STATUSES)}, openapi_extra=TAKES_A_DEADLINE
)(rerank)
v1_router.post(
    "/rerank",
    response_model=RerankResponse,
    responses={**ANSWER, **openai_errors(*STATUSES)},
    openapi_extra=TAKES_A_DEADLINE,
)(rerank)
