"""The supervisor's two watches over a running tritonserver, each an object it owns: the
watchdog, which restarts a tritonserver that exited and has the listeners load its models
again, and the stub watch, which tells the listeners each model that lost an instance's
stub process while its tritonserver runs on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from ..settings import Settings
from . import instances
from .server import LostListener, RestartListener

log = logging.getLogger("embedgate.triton")

# How often the supervisor looks at its Triton's stubs.
STUB_POLL_S = 0.5


class Restartable(Protocol):
    """What the watchdog needs of the process it restarts (``process.py``)."""

    async def exited(self) -> int: ...

    async def terminate(self, graceful: bool) -> None: ...

    async def spawn(self) -> None: ...


class Watchdog:
    """Restarts a tritonserver that exited (first after the restart backoff, doubling on
    failure), then has the listeners load its models again. ``serving`` is set while
    Triton runs with its models loaded: cleared from its exit until the listeners are done."""

    def __init__(self, process: Restartable, settings: Settings, stopping: Callable[[], bool]):
        self.process = process
        self.settings = settings
        self.stopping = stopping
        self.restarts = 0
        self.serving = asyncio.Event()
        self.listeners: list[RestartListener] = []

    async def run(self) -> None:
        backoff = self.settings.triton_restart_backoff_s
        while not self.stopping():
            code = await self.process.exited()
            if self.stopping():
                return
            self.serving.clear()
            started = time.monotonic()
            log.error("tritonserver exited unexpectedly (code %s); restarting", code)
            await self.process.terminate(graceful=False)
            await asyncio.sleep(backoff)
            try:
                await self.process.spawn()
            except Exception:
                log.exception("tritonserver restart failed")
                backoff = min(max(backoff * 2, 0.5), 30.0)
                continue
            self.restarts += 1
            backoff = self.settings.triton_restart_backoff_s
            for listener in self.listeners:
                try:
                    await listener()
                except Exception:
                    log.exception("restart listener failed")
            self.serving.set()
            log.info("tritonserver restarted in %.1fs", time.monotonic() - started)


class StubWatch:
    """Tells the listeners each model that lost an instance's stub while its tritonserver
    runs on (a Triton that dies is the watchdog's). ``pid``: the running tritonserver's;
    ``serving``: whether it runs with its models loaded (stubs come and go otherwise)."""

    def __init__(self, pid: Callable[[], int | None], serving: Callable[[], bool]):
        self.pid = pid
        self.serving = serving
        self.listeners: list[LostListener] = []
        self._told: set[asyncio.Task] = set()

    async def run(self) -> None:
        seen: set[tuple[str, str]] = set()
        seen_pid = None
        while True:
            await asyncio.sleep(STUB_POLL_S)
            pid = self.pid()
            if pid is None or not self.serving():
                seen, seen_pid = set(), None
                continue
            try:
                now = await asyncio.to_thread(instances.running, pid)
            except Exception:  # noqa: BLE001 - the watch must outlive one bad look
                log.exception("could not read the stubs of tritonserver %d", pid)
                continue
            lost = instances.lost(seen, now) if pid == seen_pid and self.pid() == pid else set()
            seen, seen_pid = now, pid
            for part in sorted(lost):
                # An unload ends its stubs too: the listeners tell a loss from that.
                log.debug("a stub of model %s exited", part)
                for listener in self.listeners:
                    told = asyncio.create_task(listener(part), name=f"lost-process-{part}")
                    self._told.add(told)
                    told.add_done_callback(self._told.discard)
