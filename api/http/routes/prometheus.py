"""GET /metrics/prometheus: the gateway's and Triton's metrics in one Prometheus scrape.

``GET /metrics`` keeps the seed's JSON shape; this is the text exposition format.
"""

from fastapi import APIRouter, Depends
from starlette.responses import Response

from ...gateway import Gateway
from ...telemetry import scrape
from ..openapi import errors
from . import get_gateway

router = APIRouter(tags=["metrics"])


def cache_state(stats) -> scrape.CacheState:
    return scrape.CacheState(stats.max_bytes, stats.bytes, stats.entries, stats.evictions)


@router.get(
    "/metrics/prometheus",
    response_class=Response,
    responses={
        200: {"content": {scrape.TEXT_FORMAT: {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
        **errors(500, 503),
    },
)
async def prometheus(gateway: Gateway = Depends(get_gateway)) -> Response:
    triton_text = await scrape.fetch_triton_metrics(gateway.triton.metrics_url)
    cache = gateway.embeddings.cache
    state = scrape.GatewayState(
        models=[
            scrape.ModelState(m.name, m.inflight, m.metadata.kind, m.metadata.form, m.cache_hits, m.cache_misses)
            for m in gateway.registry.loaded()
        ],
        inflight_limit=gateway.settings.max_inflight_requests,
        triton_restarts=gateway.triton.restarts,
        triton_ready=await gateway.triton_ready(),
        triton_scraped=triton_text is not None,
        cache=None if cache is None else cache_state(cache.stats()),
    )
    return Response(scrape.render(state, triton_text), media_type=scrape.TEXT_FORMAT)
