"""Measuring the gateway alone: inference answered without Triton, for benchmarks of the
gateway's own cost."""

from __future__ import annotations

from pydantic import BaseModel, Field


class MeasuringSettings(BaseModel):
    noop_inference: bool = Field(
        False,
        description="Answer inference with zero vectors right after tokenizing, without calling "
        "Triton: a benchmark then shows the gateway's own cost. Never for real use.",
    )
