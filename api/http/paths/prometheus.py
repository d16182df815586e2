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


@router.get(
    "/metrics/prometheus",
    response_class=Response,
    responses={
        200: {"content": {scrape.TEXT_FORMAT: {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
        **errors(500, 503),
    },
)
async def prometheus(gateway: Gateway = Depends(get_gateway)) -> Response:
    return Response(await gateway.metrics_text(), media_type=scrape.TEXT_FORMAT)
