"""Cohere's v2 API: ``POST /v2/embed`` and ``POST /v2/rerank``, answered by their endpoints
(``endpoints/cohere.py``). Cohere's Python client (``cohere.ClientV2(base_url=...)``) pointed
at this server works unchanged; errors have the project's shape."""

from ...endpoints.schemas.cohere import (
    CohereEmbedRequest,
    CohereEmbedResponse,
    CohereRerankRequest,
    CohereRerankResponse,
)
from ...endpoints.timing import documented_headers
from ..openapi import errors
from ..route_table import EndpointRoute, EndpointRouter

router = EndpointRouter(prefix="/v2", tags=["cohere"])

# Like /infer, the answers are built by hand and the answer's model only documents them.
ANSWERS = {
    200: {"headers": documented_headers(text_always=True)},
    **errors(400, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504),
}
router.endpoint_route(
    EndpointRoute("/embed", "cohere_embed", CohereEmbedRequest, "cohere_embed", CohereEmbedResponse, ANSWERS)
)
router.endpoint_route(
    EndpointRoute("/rerank", "cohere_rerank", CohereRerankRequest, "cohere_rerank", CohereRerankResponse, ANSWERS)
)
