"""Bodies of ``GET /health`` (liveness) and ``GET /health/ready`` (readiness)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .errors import ErrorResponse


class LiveResponse(BaseModel):
    status: Literal["live"]


class ReadyResponse(BaseModel):
    status: Literal["ready"]


class NotReadyResponse(ErrorResponse):
    status: Literal["unavailable", "starting", "busy"] | None = Field(
        None, description="Why not (absent while the gateway itself is starting)."
    )
