"""The body of ``GET /metrics``: Triton's per-model statistics under the users' model names,
and the response cache's.

A model of several Triton models (a CLIP model's towers, a multimodal model's text and
image graphs, a vision-language model's language and vision graphs, a dense model's
late-chunking graph beside its own) has an entry per part, ``part`` naming it as its kind
does (``compute/requests/kinds/<kind>.py``'s ``metric_parts``): the schema lists every name
a kind gives, read from the one registry of kinds.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ...compute.requests.kinds import KINDS

PartName = Literal[tuple(sorted({part for kind in KINDS.values() for part in kind.metric_parts}))]  # type: ignore[valid-type]


class StageTime(BaseModel):
    count: int
    ns: int


class BatchStats(BaseModel):
    # Triton's per-batch-size times (compute_input, compute_infer, compute_output: StageTime).
    model_config = ConfigDict(extra="allow")

    batch_size: int


class ModelStats(BaseModel):
    name: str = Field(description="The model's name (a part's: its model's).")
    triton_name: str
    version: str
    last_inference: int = Field(description="Milliseconds since the epoch; 0 before the first.")
    inference_count: int
    execution_count: int
    average_batch_size: float = Field(description="inference_count / execution_count: Triton's average batch.")
    inference_stats: dict[str, StageTime] = Field(description="Triton's cumulative times per stage.")
    batch_stats: list[BatchStats]
    pretrained: str | None = Field(None, description="A CLIP model's parts: the model's pretrained.")
    part: PartName | None = Field(
        None,
        description="A model of several Triton models: which part this entry is (a CLIP model's text_encoder or "
        "image_encoder, a multimodal model's text or image graph, a vision-language model's language or vision "
        "graph, a late-chunking model's model or late_chunking graph); absent for a model of one.",
    )


class ResponseCacheStats(BaseModel):
    max_bytes: int = Field(description="The bound (EMBEDGATE_RESPONSE_CACHE_MB).")
    bytes: int
    entries: int = Field(description="Inputs whose model output is held.")
    hits: int = Field(description="Inputs answered from the cache, since the gateway started.")
    misses: int = Field(description="Inputs the model ran for, since the gateway started.")
    evictions: int = Field(description="Outputs dropped to stay within the bound.")


class MetricsResponse(BaseModel):
    model_stats: list[ModelStats]
    response_cache: ResponseCacheStats | None = Field(None, description="The response cache; null when it is off.")
