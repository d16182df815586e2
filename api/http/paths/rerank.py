"""``POST /rerank`` and ``POST /v1/rerank``: a relevance score for a query and each document,
best first, answered by their endpoint (``endpoints/rerank.py``); ``/v1/rerank`` answers
errors in OpenAI's shape like the other ``/v1`` routes."""

from __future__ import annotations

from ...endpoints.schemas.rerank import RerankRequest, RerankResponse
from ...endpoints.timing import documented_headers
from ..openapi import openai_errors
from ..route_table import EndpointRoute, EndpointRouter

router = EndpointRouter(tags=["rerank"])
v1_router = EndpointRouter(prefix="/v1", tags=["rerank"], errors=openai_errors)
STATUSES = (400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504)
ANSWER = {200: {"headers": documented_headers(text_always=True)}}


for on in (router, v1_router):
    on.endpoint_route(
        EndpointRoute("/rerank", "rerank", RerankRequest, "rerank", RerankResponse, {**ANSWER, **on.errors(*STATUSES)})
    )
