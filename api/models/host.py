"""Triton and the models loaded in it: what one server process owns, whether it also
serves HTTP (a single gateway) or only runs the model lifecycle for its gateway workers
(the primary of ``embedgate serve --workers N``).

It starts the embedded tritonserver (or uses an external one), keeps the registry,
brings back the models of the manifest (and the preloads) at startup, and, where Triton
is external, loads again what that Triton lost when it restarted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from ..errors import EmbedgateError
from ..settings import Settings
from ..triton.client import TritonClient
from ..triton.external import ExternalTriton
from ..triton.supervisor import LostListener, RestartListener, TritonSupervisor
from .registry import ModelRegistry

log = logging.getLogger("embedgate")
# How often an external Triton is checked for the models it should serve.
EXTERNAL_CHECK_S = 2.0
# How long an external Triton's readiness answer is reused (health checks stay cheap).
READY_CACHE_S = 1.0


class Triton(Protocol):
    """What the gateway needs of the Triton it serves through: where it is, whether it
    is ready, and its restarts (the embedded supervisor, an external Triton, or in a
    gateway worker the primary's supervisor as reported to it)."""

    embedded: bool
    restarts: int
    # Runs with its models loaded (false from its death until they are back).
    serving: bool
    url: str
    grpc_url: str
    metrics_url: str
    pid: int | None

    def is_ready(self) -> bool: ...

    def on_restart(self, listener: RestartListener) -> None: ...

    def on_lost_process(self, listener: LostListener) -> None: ...

    async def wait_restarted(self, since: int) -> bool: ...

    async def wait_serving(self) -> bool: ...

    async def watch_load(self, triton_name: str) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def triton_for(settings: Settings) -> Triton:
    if settings.embedded:
        return TritonSupervisor(settings, settings.model_repository)
    return ExternalTriton(settings.triton_url or "", settings.triton_metrics_url, settings.triton_grpc_url)


class ModelHost:
    """``restore``: this process keeps the manifest and brings its models back at startup
    (a single gateway, the primary); replicas of a cluster are told their models instead.
    ``triton``: a Triton another process runs and watches (a gateway worker's view of its
    primary's), instead of the settings' own."""

    def __init__(self, settings: Settings, *, restore: bool = True, triton: Triton | None = None):
        self.settings = settings
        self.restore = restore
        self.triton: Triton = triton if triton is not None else triton_for(settings)
        self.client: TritonClient
        self.registry: ModelRegistry
        self.restoring = True
        self._tasks: list[asyncio.Task] = []
        self._external_ready = (0.0, False)

    async def start(self) -> None:
        await self.triton.start()
        self.client = TritonClient(
            self.triton.url,
            self.triton.grpc_url,
            control_timeout_s=self.settings.load_timeout_s,
            load_watch=self.triton.watch_load,
        )
        self.registry = ModelRegistry(self.settings, self.client, self.triton, keep_manifest=self.restore)
        self.triton.on_restart(self.registry.reload_all)
        self.triton.on_lost_process(self.registry.process_exited)
        if not self.triton.embedded:
            self._tasks.append(asyncio.create_task(self._watch_external(), name="external-triton-watch"))
        if self.restore:
            self._tasks.append(asyncio.create_task(self._restore(), name="restore-models"))

    async def stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop(self) -> None:
        """After :meth:`stop_tasks` and after every other client of Triton closed."""
        # Close keep-alive connections before Triton stops (else it waits, then segfaults).
        await self.client.close()
        await self.triton.stop()

    async def _restore(self) -> None:
        """Bring back the models that were loaded before a restart, then preloads."""
        names = list(dict.fromkeys(await asyncio.to_thread(self.registry.manifest) + self.settings.preload_models))
        for name in names:
            try:
                await self.registry.restore(name)
            except EmbedgateError as exc:
                log.error("could not restore model %s: %s", name, exc.message)
        self.restoring = False

    async def _watch_external(self) -> None:
        """Nobody here restarts an external Triton, and one that restarts comes back with
        no model loaded: check every few seconds and load again what it lost."""
        while True:
            await asyncio.sleep(EXTERNAL_CHECK_S)
            if self.restoring:
                continue
            try:
                await self.registry.reload_missing()
            except EmbedgateError:
                pass  # unreachable right now: next time

    async def triton_ready(self) -> bool:
        if self.triton.embedded:
            return self.triton.is_ready()
        # External Triton: ask it, at most once a second.
        checked_at, ready = self._external_ready
        if time.monotonic() - checked_at > READY_CACHE_S:
            ready = await self.client.is_ready()
            self._external_ready = (time.monotonic(), ready)
        return ready
