"""The embedded tritonserver: started, watched, restarted, and stopped without leftovers.

The supervisor is what the rest of the gateway sees of it (``server.TritonServer``); the
work is done by the objects it owns, each behind a narrow interface: the process
(``process.py``: spawned on free ports, ended with its stubs and shared memory), the
watchdog and the stub watch (``watches.py``), and the watch beside each load
(``stalls.py``: a load whose stubs hang ends this tritonserver).
"""

from __future__ import annotations

import asyncio
import os
import time

from ..settings import Settings
from . import instances, stalls
from .process import TritonProcess
from .server import LostListener, RestartListener
from .watches import StubWatch, Watchdog

# How long a running, serving tritonserver takes to count as never gone after a lost
# connection (the watchdog, on a starved machine, may take seconds to see one that died).
NOTICE_S = 2.0


class TritonSupervisor:
    """An embedded tritonserver process and its watches."""

    embedded = True

    def __init__(self, settings: Settings, repository: str | os.PathLike[str]):
        self.settings = settings
        self.process = TritonProcess(settings, repository)
        self._stopping = False
        self.watchdog = Watchdog(self.process, settings, lambda: self._stopping)
        self.stubs = StubWatch(lambda: self.process.pid, lambda: self.serving)
        self._tasks: list[asyncio.Task] = []

    # --- what the rest of the gateway sees
    @property
    def repository(self) -> str:
        return self.process.repository

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self._ports().http}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self._ports().grpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self._ports().metrics}/metrics"

    def _ports(self):
        assert self.process.ports is not None, "supervisor not started"
        return self.process.ports

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def restarts(self) -> int:
        return self.watchdog.restarts

    def is_ready(self) -> bool:
        return self.process.ready

    @property
    def serving(self) -> bool:
        """Triton runs with its models loaded (false from its death until they are back)."""
        return self.watchdog.serving.is_set()

    def on_restart(self, listener: RestartListener) -> None:
        self.watchdog.listeners.append(listener)

    def on_lost_process(self, listener: LostListener) -> None:
        self.stubs.listeners.append(listener)

    async def wait_restarted(self, since: int) -> bool:
        """After a lost connection: wait until the watchdog has restarted Triton (counted
        past ``since``) and reloaded its models. False when Triton never went away: it
        still runs, serving, 2 s on. A tritonserver that died is waited for however long
        the watchdog takes to see it (on a starved machine, seconds): the request's
        deadline bounds the wait."""
        noticed = time.monotonic() + NOTICE_S
        while self.restarts == since and not self._stopping:
            if self.serving and time.monotonic() > noticed and self._running():
                return False
            await asyncio.sleep(0.05)
        return await self.wait_serving()

    async def wait_serving(self) -> bool:
        """Wait until Triton runs with its models loaded; False when it is being stopped."""
        if self._stopping:
            return False
        await self.watchdog.serving.wait()
        return True

    def _running(self) -> bool:
        proc = self.process.proc
        return proc is not None and proc.returncode is None and instances.alive(proc.pid)

    async def watch_load(self, triton_name: str) -> None:
        """Run beside a load of ``triton_name``: a load that hangs ends this tritonserver
        (``stalls.py``), which the watchdog then restarts."""
        await stalls.end_a_hung_load(lambda: self.process.proc, triton_name, self.settings)

    # --- lifecycle
    async def start(self) -> None:
        await self.process.prepare()
        await self.process.spawn_on_free_ports()
        self.watchdog.serving.set()
        self._tasks = [
            asyncio.create_task(self.watchdog.run(), name="triton-watchdog"),
            asyncio.create_task(self.stubs.run(), name="triton-stub-watch"),
        ]

    async def stop(self) -> None:
        """Stop Triton. Close every client of it before calling this."""
        self._stopping = True
        self.process.ready = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.process.terminate(graceful=True, last=True)
