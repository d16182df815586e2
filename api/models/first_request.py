"""Loads on a model's first request (``EMBEDGATE_LOAD_ON_FIRST_REQUEST``): a request for a
model that is in the repository but not loaded loads it, then is answered.

Every request for the model waits for the same load (one task per model); the wait counts
against each request's deadline, and a request whose deadline passes is answered 504 while
the load goes on for the next ones. The load is the management routes' own, as the repository
holds the model (``from_repository``: never converted, so an ordinary key never starts a
conversion; a remote repository, not read on the request path, is read by the load, which
answers 404 where it does not hold the model), through whoever loads models here
(``ModelControl``: the registry, a gateway worker's primary, which decides once for all
workers), and under the memory budget.
While requests wait, and until they are answered, the model is in use for the budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from ..errors import DeadlineExceeded, EmbedgateError, ModelNotFound
from ..telemetry.metrics import FIRST_REQUEST_LOADS
from .control import LoadOutcome, ModelControl
from .names import split_clip_key
from .residency import Residency

log = logging.getLogger("embedgate.registry")
TASK_PREFIX = "first-request-load "
NOT_IN_REPOSITORY = "(not in the repository)"


class FirstRequestLoads:
    """``control``: what loads models here, asked when a load starts (the gateway's, once it runs)."""

    def __init__(self, control: Callable[[], ModelControl], residency: Residency):
        self._control = control
        self.residency = residency
        self._loads: dict[str, asyncio.Task[LoadOutcome]] = {}

    @contextlib.asynccontextmanager
    async def loaded(self, key: str, timeout_s: float) -> AsyncIterator[float]:
        """Wait (at most ``timeout_s``) for ``key`` (a registry key) to be loaded, starting its
        load unless one runs; yields the seconds waited, and holds the model in use until the
        block ends (the request answered)."""
        started = time.perf_counter()
        self.residency.waiting[key] += 1
        try:
            task = self._loads.get(key)
            if task is None:
                task = self._loads[key] = asyncio.create_task(self._load(key), name=TASK_PREFIX + key)
                task.add_done_callback(self._done)
            try:
                async with asyncio.timeout(timeout_s):
                    await asyncio.shield(task)
            except TimeoutError:
                raise DeadlineExceeded(
                    f"model '{key}' was still loading when the request's {timeout_s:g}s deadline passed; "
                    "its load goes on"
                ) from None
            yield time.perf_counter() - started
        finally:
            self.residency.waiting[key] -= 1
            if not self.residency.waiting[key]:
                del self.residency.waiting[key]

    def _done(self, task: asyncio.Task[LoadOutcome]) -> None:
        key = task.get_name().removeprefix(TASK_PREFIX)
        if self._loads.get(key) is task:
            del self._loads[key]
        if not task.cancelled():
            task.exception()  # retrieved: every request that waited for it may have gone

    async def _load(self, key: str) -> LoadOutcome:
        control = self._control()
        clip = split_clip_key(key)
        started = time.perf_counter()
        try:
            if clip:
                outcome = await control.load_clip(*clip, from_repository=True)
            else:
                outcome = await control.load_sentence_transformer(key, from_repository=True)
        except EmbedgateError as error:
            # A model a remote repository turned out not to hold is a name a client sent: not a label.
            FIRST_REQUEST_LOADS.labels(NOT_IN_REPOSITORY if isinstance(error, ModelNotFound) else key, error.code).inc()
            log.warning("model %s could not be loaded for a request: %s", key, error.message)
            raise
        FIRST_REQUEST_LOADS.labels(key, "loaded").inc()
        log.info("model %s loaded on its first request in %.2fs", key, time.perf_counter() - started)
        return outcome
