"""What runs the models and the models loaded in it: what one server process owns,
whether it also serves HTTP (a single gateway) or only runs the model lifecycle for its
gateway workers (the primary of ``embedgate serve --workers N``).

Given a started backend (``api/compute/backend/``), it keeps the registry, has the backend
tell it of a restart and of a lost process, brings back the models of the manifest (and
the preloads) at startup, and, where nobody here watches the server (an external Triton),
loads again what that server lost when it restarted.
"""

from __future__ import annotations

import asyncio
import logging

from ..compute.backend.base import Backend
from ..errors import EmbedgateError
from ..settings import Settings
from .registry import ModelRegistry

log = logging.getLogger("embedgate")
# How often a server nobody here watches is checked for the models it should serve.
EXTERNAL_CHECK_S = 2.0


class ModelHost:
    """``restore``: this process keeps the manifest and brings its models back at startup
    (a single gateway, the primary); replicas of a cluster are told their models instead."""

    def __init__(self, settings: Settings, *, restore: bool = True):
        self.settings = settings
        self.restore = restore
        self.backend: Backend
        self.registry: ModelRegistry
        self.restoring = True
        self._tasks: list[asyncio.Task] = []

    async def start(self, backend: Backend) -> None:
        self.backend = backend
        self.registry = ModelRegistry(self.settings, backend, keep_manifest=self.restore)
        backend.on_restart(self.registry.reload_all)
        backend.on_lost_process(self.registry.process_exited)
        if not backend.watched:
            self._tasks.append(asyncio.create_task(self._watch_external(), name="external-triton-watch"))
        if self.restore:
            self._tasks.append(asyncio.create_task(self._restore(), name="restore-models"))
            # Who loads the models unloads the idle ones (a Ray replica follows the desired state).
            self._tasks.append(asyncio.create_task(self.registry.residency.expire_idle(), name="keep-alive"))

    async def stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def stop(self) -> None:
        """After :meth:`stop_tasks` and after every other user of the backend stopped."""
        await self.backend.close()

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
