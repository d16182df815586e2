"""Liveness and readiness. Both answer from in-memory state, so they stay fast while
inference runs."""

from fastapi import APIRouter, Depends

from ...endpoints.schemas.health import LiveResponse, NotReadyResponse, ReadyResponse
from ...gateway import Gateway
from ..errors import error_body
from ..openapi import errors
from ..responses import JSONResponse
from . import get_gateway

router = APIRouter(tags=["health"])


@router.get("/health", response_model=LiveResponse)
async def live() -> JSONResponse:
    return JSONResponse({"status": "live"})


@router.get(
    "/health/ready",
    response_model=ReadyResponse,
    responses={**errors(500), **errors(503, body=NotReadyResponse)},
)
async def ready(gateway: Gateway = Depends(get_gateway)) -> JSONResponse:
    if not await gateway.triton_ready():
        status, message = "unavailable", "the inference server is not ready"
    elif gateway.restoring:
        status, message = "starting", "models from before the restart are still loading"
    elif gateway.saturated():
        status, message = "busy", "a model has reached its limit of requests in flight"
    else:
        return JSONResponse({"status": "ready"})
    body = {"status": status, **error_body(503, status, message)}
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})
