"""GET /metrics: Triton's per-model inference statistics, under the users' model names.

A CLIP model has an entry per part: its ``name`` and ``pretrained`` are the user's, and
``part`` says which tower (``text_encoder`` or ``image_encoder``).
"""

import dataclasses
from typing import Any

from fastapi import APIRouter, Depends

from ...endpoints.schemas.metrics import MetricsResponse
from ...gateway import Gateway
from ...models.names import from_triton_name
from ..openapi import errors
from ..responses import JSONResponse
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


def part_names(gateway: Gateway) -> dict[str, dict[str, str]]:
    """Triton name of each part of a loaded model of several parts (a CLIP model's towers)
    -> the user's names for it."""
    parts = {}
    for model in gateway.registry.loaded():
        for triton_name, labels in model.kind.part_labels(model.triton_name).items():
            parts[triton_name] = {"name": model.metadata.model_name, **labels}
    return parts


@router.get("/metrics", response_model=MetricsResponse, responses=errors(500, 502, 503))
async def metrics(gateway: Gateway = Depends(get_gateway)) -> JSONResponse:
    stats = await gateway.backend.statistics()
    parts = part_names(gateway)
    cache = gateway.embeddings.cache
    return JSONResponse(
        {
            "model_stats": [model_stats_entry(s) | parts.get(s["name"], {}) for s in stats],
            "response_cache": None if cache is None else dataclasses.asdict(cache.stats()),
        }
    )
