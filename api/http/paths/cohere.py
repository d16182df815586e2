"""Cohere's v2 API: ``POST /v2/embed`` and ``POST /v2/rerank``, answered by their endpoints
(``endpoints/cohere.py``). Cohere's Python client (``cohere.ClientV2(base_url=...)``) pointed
at this server works unchanged; errors have the project's shape."""

from fastapi import APIRouter

from ...endpoints.schemas.cohere import CohereEmbedRequest, CohereEmbedResponse, CohereRerankRequest, CohereRerankResponse
from ...endpoints.timing import documented_headers
from ..openapi import errors
from ..routing import BodyRoute
from . import endpoint_route

router = APIRouter(prefix="/v2", tags=["cohere"], route_class=BodyRoute)

# Like /infer, the answers are built by hand and response_model only documents them.
endpoint_route(
    router, "/embed", CohereEmbedRequest, lambda endpoints: endpoints.cohere_embed, name="cohere_embed",
    response_model=CohereEmbedResponse,
    responses={200: {"headers": documented_headers(text_always=True)}, **errors(400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504)},
)
endpoint_route(
    router, "/rerank", CohereRerankRequest, lambda endpoints: endpoints.cohere_rerank, name="cohere_rerank",
    response_model=CohereRerankResponse,
    responses={200: {"headers": documented_headers(text_always=True)}, **errors(400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504)},
)
