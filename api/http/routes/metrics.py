"""GET /metrics: Triton's per-model inference statistics, under the users' model names.

A CLIP model has an entry per part: its ``name`` and ``pretrained`` are the user's, and
``part`` says which tower (``text_encoder`` or ``image_encoder``).
"""

from typing import Any

from fastapi import APIRouter, Depends

from embedgate.converters.spec import clip_part_names

from ...gateway import Gateway
from ...models.names import from_triton_name
from ..openapi import errors
from ..responses import JSONResponse
from ..schemas import MetricsResponse
from . import get_gateway

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


def clip_parts(gateway: Gateway) -> dict[str, dict[str, str]]:
    """Triton name of each loaded CLIP part -> the user's names for it."""
    parts = {}
    for model in gateway.registry.loaded():
        metadata = model.metadata
        if metadata.clip is not None:
            for part, triton_name in zip(("text_encoder", "image_encoder"), clip_part_names(metadata.triton_name)):
                parts[triton_name] = {"name": metadata.model_name, "pretrained": metadata.clip.pretrained, "part": part}
    return parts


@router.get("/metrics", response_model=MetricsResponse, responses=errors(500, 502, 503))
async def metrics(gateway: Gateway = Depends(get_gateway)) -> JSONResponse:
    stats = await gateway.client.statistics()
    parts = clip_parts(gateway)
    return JSONResponse({"model_stats": [model_stats_entry(s) | parts.get(s["name"], {}) for s in stats]})
