"""The supervisor's two watches over a running tritonserver: the watchdog, which restarts
a tritonserver that exited and has the listeners load its models again, and the stub
watch, which tells the listeners each model that lost an instance's stub process while
its tritonserver runs on. A mixin of ``TritonSupervisor``, whose state they read."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from ..settings import Settings
from . import instances

log = logging.getLogger("embedgate.triton")

RestartListener = Callable[[], Awaitable[None]]
# Told the Triton model (a part) one of whose instances lost its stub process.
LostListener = Callable[[str], Awaitable[None]]

# How often the supervisor looks at its Triton's stubs.
STUB_POLL_S = 0.5
# How often the watchdog looks whether tritonserver has exited.
EXIT_POLL_S = 0.1


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """Its exit code, as soon as the process has exited. ``Process.wait()`` also waits
    until the output pipe closes, which a stub that outlived tritonserver (in its process
    group, never told its parent is gone) holds open: seen after a model was unloaded and
    loaded again, the watchdog then never restarted a killed tritonserver."""
    while proc.returncode is None:
        await asyncio.sleep(EXIT_POLL_S)
    return proc.returncode


class Watches:
    """The two watches; what they read and call of the supervisor is declared here (the
    supervisor's ``pid`` property, ``_spawn`` and ``_terminate`` among it)."""

    settings: Settings
    restarts: int
    pid: int | None
    _proc: asyncio.subprocess.Process | None
    _stopping: bool
    _ready: bool
    _serving: asyncio.Event
    _listeners: list[RestartListener]
    _lost_listeners: list[LostListener]
    _told: set[asyncio.Task]
    _spawn: Callable[[], Awaitable[None]]
    _terminate: Callable[[bool], Awaitable[None]]

    async def _watch(self) -> None:
        backoff = self.settings.triton_restart_backoff_s
        while not self._stopping:
            proc = self._proc
            assert proc is not None
            code = await _exited(proc)
            if self._stopping:
                return
            self._ready = False
            self._serving.clear()
            started = time.monotonic()
            log.error("tritonserver exited unexpectedly (code %s); restarting", code)
            await self._terminate(graceful=False)
            await asyncio.sleep(backoff)
            try:
                await self._spawn()
            except Exception:
                log.exception("tritonserver restart failed")
                backoff = min(max(backoff * 2, 0.5), 30.0)
                continue
            self.restarts += 1
            backoff = self.settings.triton_restart_backoff_s
            for listener in self._listeners:
                try:
                    await listener()
                except Exception:
                    log.exception("restart listener failed")
            self._serving.set()
            log.info("tritonserver restarted in %.1fs", time.monotonic() - started)

    async def _watch_stubs(self) -> None:
        """Tell the listeners each model that lost an instance's stub while its
        tritonserver runs on (a Triton that dies is the watchdog's)."""
        seen: set[tuple[str, str]] = set()
        seen_pid = None
        while not self._stopping:
            await asyncio.sleep(STUB_POLL_S)
            pid = self.pid
            if pid is None or not self._serving.is_set():
                seen, seen_pid = set(), None
                continue
            try:
                now = await asyncio.to_thread(instances.running, pid)
            except Exception:  # noqa: BLE001 - the watch must outlive one bad look
                log.exception("could not read the stubs of tritonserver %d", pid)
                continue
            lost = instances.lost(seen, now) if pid == seen_pid and self.pid == pid else set()
            seen, seen_pid = now, pid
            for part in sorted(lost):
                # An unload ends its stubs too: the listeners tell a loss from that.
                log.debug("a stub of model %s exited", part)
                for listener in self._lost_listeners:
                    told = asyncio.create_task(listener(part), name=f"lost-process-{part}")
                    self._told.add(told)
                    told.add_done_callback(self._told.discard)
