"""GET /metrics: Triton's per-model inference statistics, under the users' model names."""

from typing import Any

from fastapi import APIRouter, Depends

from ..gateway import Gateway
from ..names import from_triton_name
from ..responses import JSONResponse
from . import ERRORS, get_gateway

router = APIRouter(tags=["metrics"])


def model_stats_entry(stats: dict[str, Any]) -> dict[str, Any]:
    inferences = int(stats.get("inference_count", 0))
    executions = int(stats.get("execution_count", 0))
    return {
        "name": from_triton_name(stats["name"]),
        "triton_name": stats["name"],
        "version": stats.get("version", ""),
        "last_inference": stats.get("last_inference", 0),
        "inference_count": inferences,
        "execution_count": executions,
        # inference_count counts requests' batch rows; execution_count counts model
        # runs: their ratio is the average dynamic batch size.
        "average_batch_size": round(inferences / executions, 3) if executions else 0.0,
        "inference_stats": stats.get("inference_stats", {}),
        "batch_stats": stats.get("batch_stats", []),
    }


@router.get("/metrics", responses=ERRORS)
async def metrics(gateway: Gateway = Depends(get_gateway)) -> JSONResponse:
    stats = await gateway.client.statistics()
    return JSONResponse({"model_stats": [model_stats_entry(s) for s in stats]})
