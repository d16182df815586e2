"""``POST /rerank`` and ``POST /v1/rerank``: a relevance score for a query and each document,
best first, answered by their endpoint (``endpoints/rerank.py``); ``/v1/rerank`` answers
errors in OpenAI's shape like the other ``/v1`` routes."""

from __future__ import annotations

from fastapi import APIRouter

from ...endpoints.schemas.rerank import RerankRequest, RerankResponse
from ...endpoints.timing import documented_headers
from ..openapi import errors, openai_errors
from ..routing import BodyRoute
from . import endpoint_route

router = APIRouter(tags=["rerank"], route_class=BodyRoute)
v1_router = APIRouter(prefix="/v1", tags=["rerank"], route_class=BodyRoute)
STATUSES = (400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504)
ANSWER = {200: {"headers": documented_headers(text_always=True)}}


for on, documented_errors in ((router, errors), (v1_router, openai_errors)):
    endpoint_route(
        on, "/rerank", RerankRequest, lambda endpoints: endpoints.rerank, name="rerank",
        response_model=RerankResponse, responses={**ANSWER, **documented_errors(*STATUSES)},
    )
