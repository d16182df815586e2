"""The backend that serves: Triton, through the gateway's async client (``api/triton/``).

Its calls are sent again where Triton or the model's process died under them
(``resend.py``); a load that Triton died under is made again once Triton is back; an
unload waits out a Triton being brought back. The server itself is the embedded
supervisor, an external Triton, or a gateway worker's view of its primary's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import TritonConnectionLost
from ...settings import Settings
from ...telemetry import scrape
from ...triton import device_memory, gpus, instances
from ...triton.client import TritonClient
from ...triton.external import ExternalTriton
from ...triton.server import TritonServer
from ...triton.supervisor import TritonSupervisor
from ..requests.served import ServedModel
from . import resend
from .base import HostMemory, LostListener, RestartListener, Tensors

log = logging.getLogger("embedgate.registry")
# How long Triton's own answer to "ready?" is reused (health checks stay cheap), and how
# long one is waited for: a tritonserver that runs but does not answer (hung, stopped) is
# not ready, however long ago it started.
READY_CACHE_S = 1.0
READY_ASK_TIMEOUT_S = 3.0
# What Triton says of a model it holds.
HOLDING = ("READY", "LOADING")


def triton_for(settings: Settings) -> TritonServer:
    """The Triton the settings name: embedded (started here), or external."""
    if settings.embedded:
        return TritonSupervisor(settings, settings.model_repository)
    return ExternalTriton(settings.triton_url or "", settings.triton_metrics_url, settings.triton_grpc_url)


class TritonBackend:
    """``triton``: the server (None: only the client, which nobody restarts)."""

    def __init__(self, client: TritonClient, triton: TritonServer | None = None):
        self.client = client
        self.triton = triton
        # Set by the gateway: whoever loads models here (the registry, or a worker's primary).
        self.reload_lost: resend.ReloadLost | None = None
        self._ready_at = (0.0, False)

    @classmethod
    async def started(cls, settings: Settings, triton: TritonServer | None = None) -> TritonBackend:
        """``triton`` (else the settings' own) started, and a client to it."""
        triton = triton if triton is not None else triton_for(settings)
        await triton.start()
        client = TritonClient(
            triton.url, triton.grpc_url, control_timeout_s=settings.load_timeout_s, load_watch=triton.watch_load
        )
        return cls(client, triton)

    # --- the server
    @property
    def restarts(self) -> int:
        return self.triton.restarts if self.triton is not None else 0

    @property
    def watched(self) -> bool:
        return self.triton is None or self.triton.embedded

    async def ready(self) -> bool:
        """An external Triton: ready as it answers (asked at most once a second). An embedded
        one: running as its supervisor sees it (not starting, not restarting) and answering
        at all (alive: its own readiness also says no while a model loads)."""
        embedded = self.triton is not None and self.triton.embedded
        if embedded and not self.triton.is_ready():
            return False
        checked_at, ready = self._ready_at
        if time.monotonic() - checked_at > READY_CACHE_S:
            try:
                asked = self.client.is_live() if embedded else self.client.is_ready()
                ready = await asyncio.wait_for(asked, READY_ASK_TIMEOUT_S)
            except asyncio.TimeoutError:
                ready = False
            self._ready_at = (time.monotonic(), ready)
        return ready

    def has_gpu(self) -> bool:
        # The Python backend's GPU instances run PyTorch on a GPU of this host.
        return gpus.available()

    def on_restart(self, listener: RestartListener) -> None:
        if self.triton is not None:
            self.triton.on_restart(listener)

    def on_lost_process(self, listener: LostListener) -> None:
        if self.triton is not None:
            self.triton.on_lost_process(listener)

    async def close(self) -> None:
        # Close keep-alive connections before Triton stops (else it waits, then segfaults).
        await self.client.close()
        if self.triton is not None:
            await self.triton.stop()

    # --- a model's life
    async def load(self, model: ServedModel, *, fresh: bool = False) -> None:
        if not model.triton_names:
            return  # (a model the gateway computes whole)
        restarts = self.restarts
        try:
            await self._load_whole(model, fresh)
        except TritonConnectionLost:
            # Triton died under the load (or was ended for a load that hung): once its
            # supervisor has it back, load again, so the caller sees a slower success.
            if self.triton is None or not await self.triton.wait_restarted(restarts):
                raise
            log.warning("triton restarted while loading %s; loading it again", model.name)
            await self._load_whole(model, fresh)

    async def _load_whole(self, model: ServedModel, fresh: bool) -> None:
        parts = model.triton_names
        if not fresh and await self._already_held(parts):
            log.info("model %s is already loaded in the external Triton; serving it as it is", model.name)
            return
        loads = [asyncio.create_task(self.client.load(part)) for part in parts]
        outcomes = await asyncio.gather(*loads, return_exceptions=True)
        failure = next((outcome for outcome in outcomes if isinstance(outcome, BaseException)), None)
        if failure is not None:
            # A model of several parts is served whole or not at all.
            for part, outcome in zip(parts, outcomes):
                if not isinstance(outcome, BaseException):
                    await asyncio.gather(self.client.unload(part), return_exceptions=True)
            raise failure

    async def _already_held(self, parts: Sequence[str]) -> bool:
        """An external Triton that already serves every part (another gateway loaded the
        model): loading it again would replace its instances under that gateway's requests."""
        if self.watched:
            return False
        states = await self.client.repository_states()
        return all(states.get(part) == "READY" for part in parts)

    async def load_again(self, model: ServedModel) -> None:
        for part in model.triton_names:
            await self.client.load(part)

    async def reload(self, part: str) -> None:
        await self.client.reload(part)

    def abandon(self, part: str, sent_before: float) -> None:
        self.client.abandon(part, sent_before)

    async def unload(self, model: ServedModel, *, timeout_s: float) -> None:
        # Waiting for Triton to let go of each part (it drains what it holds of the model
        # first) takes half the deadline at most, shared between the parts: a model slow to
        # let go is logged and answered as unloaded; the rest of the deadline is for a
        # Triton being brought back.
        parts = model.triton_names
        drain_s = timeout_s / 2 / max(1, len(parts))

        async def unload(part: str) -> None:
            await self.client.unload(part, wait_s=drain_s)

        await resend.unloaded(unload, parts, self.triton, timeout_s)

    async def held(self) -> set[str]:
        states = await self.client.repository_states()
        return {part for part, state in states.items() if state in HOLDING}

    # --- its calls
    async def infer(
        self, model: ServedModel, part: str, tensors: Tensors, output: str, *, timeout_s: float, version: str = ""
    ) -> np.ndarray:
        tensors = model.kind.fed(part, tensors)
        return await resend.surviving(
            lambda: self.client.infer(part, tensors, output, timeout_s=timeout_s, version=version),
            model.name,
            self.triton,
            self.reload_lost,
        )

    # --- what it ran
    async def statistics(self) -> list[dict[str, Any]]:
        return await self.client.statistics()

    async def metrics_text(self) -> bytes | None:
        return None if self.triton is None else await scrape.fetch_triton_metrics(self.triton.metrics_url)

    def host_memory(self) -> HostMemory | None:
        pid = getattr(self.triton, "pid", None)
        if pid is None:  # none, or one that runs elsewhere (external, a gateway worker's primary's)
            return None
        return HostMemory(instances.resident_bytes(pid), instances.resident_by_model(pid))

    def device_memory(self) -> dict[str, int] | None:
        pid = getattr(self.triton, "pid", None)
        used = None if pid is None else device_memory.used_by_process()
        return None if used is None else device_memory.device_by_model(pid, used)
