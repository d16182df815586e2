"""Models whose process died in Triton (a Python-backend stub killed or crashed while
tritonserver runs on): loaded again once, however many requests met the dead process,
and what the process held sent again by its callers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from ..compute.backend.base import Backend
from ..compute.requests.served import ServedModel
from ..errors import EmbedgateError, ModelNotLoaded, TritonConnectionLost

log = logging.getLogger("embedgate.registry")


class Registry(Protocol):
    """What of the registry this needs: its loaded models, their locks, its backend."""

    backend: Backend

    def held(self, key: str) -> ServedModel | None: ...

    def loaded(self) -> list[ServedModel]: ...

    def lock(self, triton_name: str) -> asyncio.Lock: ...


class LostProcesses:
    def __init__(self, registry: Registry):
        self.registry = registry
        # Told when a model part's lost process was replaced (the primary tells its
        # workers, whose calls to the old process must be sent again).
        self.on_replaced: Callable[[str, float], Awaitable[None]] | None = None
        # Triton model -> when its last reload after a lost process ended (monotonic).
        self._reloaded_at: dict[str, float] = {}

    async def reload(self, key: str, part: str, sent_at: float) -> None:
        """Load ``part`` of the model ``key`` again after its process died under a request
        sent at ``sent_at`` (``time.monotonic()``, the same clock in every process of the
        host): once for all the requests it failed, which then go again. A reload that
        ended after the request was sent replaced the process the request met (one under
        way is waited for); one that ended before it left a process that died too."""
        registry = self.registry
        model = registry.held(key)
        if model is None or part not in model.triton_names:
            raise ModelNotLoaded(f"model '{key}' is no longer loaded")
        async with registry.lock(model.triton_name):
            if self._reloaded_at.get(part, float("-inf")) >= sent_at:
                return
            if registry.held(key) is not model:
                raise ModelNotLoaded(f"model '{key}' is no longer loaded")
            log.warning("model %s lost its process in Triton (%s); loading it again", key, part)
            await registry.backend.reload(part)
            replaced_at = self._reloaded_at[part] = time.monotonic()
            log.info("model %s has a new process in Triton", key)
        # What the dead process held is never answered: sent again by its callers.
        registry.backend.abandon(part, replaced_at)
        if self.on_replaced is not None:
            await self.on_replaced(part, replaced_at)

    async def exited(self, part: str) -> None:
        """Triton's supervisor saw a process of ``part`` end while Triton runs on: where a
        served model lost it outside a load or unload of its own, load it again (requests
        waiting on that process would otherwise wait out their deadline). A loss seen while
        the model's lock is held waits for it rather than being dropped: the loss may not
        be that operation's."""
        seen_at = time.monotonic()
        model = next((m for m in self.registry.loaded() if part in m.triton_names), None)
        if model is None:
            return
        lock = self.registry.lock(model.triton_name)
        if lock.locked():
            # A load or unload of this model ends its stubs too: once it is done, a model
            # it removed or replaced lost nothing; one it kept (a check that found it loaded,
            # a reload that ended before the loss) did.
            async with lock:
                pass
            if self.registry.held(model.name) is not model:
                return
        try:
            await self.reload(model.name, part, seen_at)
        except TritonConnectionLost:
            # tritonserver went down too: a stub killed while it held the lock of the
            # memory it shares with Triton makes Triton abort. Triton's own supervisor
            # restarts it and loads every model again.
            log.info("tritonserver went down with the process of %s; its restart loads the model again", model.name)
        except EmbedgateError as exc:
            log.error("could not load %s again after it lost its process: %s", model.name, exc.message)
