"""A backend that runs no model: zeros of the shape the model's graph gives. Everything a
request costs the server but the model's forward (``EMBEDGATE_NOOP_INFERENCE``, for
measuring the server's own cost per request).

A model's life is the backend's it is given (``models``: the server the gateway would
serve through), so loads, readiness and what the server reports go on as ever and only the
calls are answered here; without one, no server at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..requests.served import ServedModel
from .base import Backend, HostMemory, LostListener, RestartListener, Tensors


class NoopBackend:
    def __init__(self, models: Backend | None = None):
        self.models = models

    async def infer(
        self, model: ServedModel, part: str, tensors: Tensors, output: str, *, timeout_s: float, version: str = ""
    ) -> np.ndarray:
        return model.kind.noop_output(tensors)

    # --- the rest is the given backend's
    @property
    def restarts(self) -> int:
        return self.models.restarts if self.models is not None else 0

    @property
    def watched(self) -> bool:
        return self.models is None or self.models.watched

    async def ready(self) -> bool:
        return self.models is None or await self.models.ready()

    def has_gpu(self) -> bool:
        return self.models is not None and self.models.has_gpu()

    def on_restart(self, listener: RestartListener) -> None:
        if self.models is not None:
            self.models.on_restart(listener)

    def on_lost_process(self, listener: LostListener) -> None:
        if self.models is not None:
            self.models.on_lost_process(listener)

    async def close(self) -> None:
        if self.models is not None:
            await self.models.close()

    async def load(self, model: ServedModel, *, fresh: bool = False) -> None:
        if self.models is not None:
            await self.models.load(model, fresh=fresh)

    async def load_again(self, model: ServedModel) -> None:
        if self.models is not None:
            await self.models.load_again(model)

    async def reload(self, part: str) -> None:
        if self.models is not None:
            await self.models.reload(part)

    def abandon(self, part: str, sent_before: float) -> None:
        if self.models is not None:
            self.models.abandon(part, sent_before)

    async def unload(self, model: ServedModel, *, timeout_s: float) -> None:
        if self.models is not None:
            await self.models.unload(model, timeout_s=timeout_s)

    async def held(self) -> set[str]:
        return await self.models.held() if self.models is not None else set()

    async def statistics(self) -> list[dict[str, Any]]:
        return await self.models.statistics() if self.models is not None else []

    async def metrics_text(self) -> bytes | None:
        return await self.models.metrics_text() if self.models is not None else None

    def host_memory(self) -> HostMemory | None:
        return self.models.host_memory() if self.models is not None else None

    def device_memory(self) -> dict[str, int] | None:
        return self.models.device_memory() if self.models is not None else None
