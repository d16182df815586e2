"""The gateway's parts, wired together once and shut down in the right order."""

from __future__ import annotations

import asyncio
import logging
import time

from .embedding import EmbeddingService
from .errors import ApiError
from .registry import ModelRegistry
from .settings import Settings
from .triton.client import TritonClient
from .triton.supervisor import ExternalTriton, TritonSupervisor

log = logging.getLogger("embedgate")


class Gateway:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.triton: TritonSupervisor | ExternalTriton = (
            TritonSupervisor(settings, settings.model_repository)
            if settings.embedded
            else ExternalTriton(settings.triton_url or "", settings.triton_metrics_url)
        )
        self.client: TritonClient
        self.registry: ModelRegistry
        self.embeddings: EmbeddingService
        self.restoring = True
        self._restore_task: asyncio.Task | None = None
        self._external_ready = (0.0, False)

    async def start(self) -> None:
        await self.triton.start()
        self.client = TritonClient(
            self.triton.url,
            infer_timeout_s=self.settings.request_timeout_s + 5,
            control_timeout_s=self.settings.load_timeout_s,
        )
        self.registry = ModelRegistry(self.settings, self.client)
        self.embeddings = EmbeddingService(self.settings, self.registry, self.client)
        self.triton.on_restart(self.registry.reload_all)
        self._restore_task = asyncio.create_task(self._restore(), name="restore-models")

    async def stop(self) -> None:
        if self._restore_task:
            self._restore_task.cancel()
            await asyncio.gather(self._restore_task, return_exceptions=True)
        # Close keep-alive connections before Triton stops (else it waits, then segfaults).
        await self.client.close()
        self.embeddings.close()
        await self.embeddings.images.close()
        await self.triton.stop()

    async def _restore(self) -> None:
        """Bring back the models that were loaded before a restart, then preloads."""
        names = list(dict.fromkeys(self.registry.manifest() + self.settings.preload_models))
        for name in names:
            try:
                await self.registry.restore(name)
            except ApiError as exc:
                log.error("could not restore model %s: %s", name, exc.message)
        self.restoring = False

    async def triton_ready(self) -> bool:
        if self.triton.embedded:
            return self.triton.is_ready()
        # External Triton: ask it, at most once a second (health checks stay cheap).
        checked_at, ready = self._external_ready
        if time.monotonic() - checked_at > 1.0:
            ready = await self.client.is_ready()
            self._external_ready = (time.monotonic(), ready)
        return ready

    def saturated(self) -> bool:
        limit = self.settings.max_inflight_requests
        return any(m.inflight >= limit for m in self.registry.loaded())
