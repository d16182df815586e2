"""The gateway worker processes: started on the server's port, watched, and
replaced when one dies.

Each worker is ``python -m embedgate.api.workers.worker``, tied to the primary
(``api/children.py``: it dies with it), listening on the server's port beside the
others (``SO_REUSEPORT``), with the settings on its standard input (they may hold keys:
never on a command line). A worker that dies is started again at once, then with a
growing delay while new ones keep dying soon after they start.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import sys
import time

from ..children import tied_to_parent
from ..settings import Settings
from ..triton import gpus

log = logging.getLogger("embedgate.workers")
# A worker that lived this long before dying was not failing at startup: no delay.
HEALTHY_AFTER_S = 10.0
MAX_BACKOFF_S = 30.0
# uvicorn's graceful shutdown (requests in flight finish), and a little more.
STOP_TIMEOUT_S = 15.0


# Auto: at most this many workers (four fed an H100 with a MiniLM-shaped model 3.0x one).
MAX_AUTO_WORKERS = 8
# A CPU host: a core for the gateway per this many (a single-sentence request costs the
# gateway 0.44 ms of a core and the model about 2.3 ms: the rest is the model's).
CORES_PER_CPU_WORKER = 4


def worker_count(settings: Settings) -> int:
    """The setting, or where it is 0: one worker per core on a GPU host (the model needs no
    core), one per four on a CPU host (the model needs the others), at most 8."""
    if settings.workers:
        return settings.workers
    cores = os.cpu_count() or 1
    per_worker = 1 if gpus.driver_gpus() else CORES_PER_CPU_WORKER
    return max(1, min(MAX_AUTO_WORKERS, cores // per_worker))


def worker_settings(settings: Settings, workers: int) -> Settings:
    """One worker's settings: the server's, with the per-process budgets split between the
    workers so that the server as a whole keeps the configured ones (the in-flight limit
    per model, the response cache's memory, each key's per-minute limits: the buckets are
    each process's own, kept without a word between them on a request's way)."""
    return settings.model_copy(
        update={
            "max_inflight_requests": math.ceil(settings.max_inflight_requests / workers),
            "response_cache_mb": settings.response_cache_mb / workers,
            "key_requests_per_minute": math.ceil(settings.key_requests_per_minute / workers),
            "key_tokens_per_minute": math.ceil(settings.key_tokens_per_minute / workers),
        }
    )


class WorkerPool:
    def __init__(self, settings: Settings, workers: int, port: int, control_path: str):
        self.count = workers
        self.port = port
        self.control_path = control_path
        own = worker_settings(settings, workers)
        # Only what was set (by flag or environment): the worker's Settings reads the same
        # environment, and unset fields keep their defaults there as here.
        self._settings_json = own.model_dump_json(include=own.model_fields_set | set(settings.model_fields_set))
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self._watchers: list[asyncio.Task] = []
        self._stopping = False

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.processes.values() if proc.returncode is None]

    async def start(self) -> None:
        for index in range(self.count):
            await self._spawn(index)
            self._watchers.append(asyncio.create_task(self._watch(index), name=f"worker-{index}"))

    async def _spawn(self, index: int) -> None:
        command = [
            sys.executable, "-m", "embedgate.api.workers.worker",
            "--port", str(self.port), "--control", self.control_path, "--index", str(index),
        ]
        proc = await asyncio.create_subprocess_exec(*tied_to_parent(command), stdin=asyncio.subprocess.PIPE)
        assert proc.stdin is not None
        proc.stdin.write(self._settings_json.encode())
        await proc.stdin.drain()
        proc.stdin.close()
        self.processes[index] = proc
        log.info("gateway worker %d started (pid %d)", index, proc.pid)

    async def _watch(self, index: int) -> None:
        backoff = 0.0
        while not self._stopping:
            proc = self.processes[index]
            started = time.monotonic()
            code = await proc.wait()
            if self._stopping:
                return
            lived = time.monotonic() - started
            backoff = 0.0 if lived > HEALTHY_AFTER_S else min(max(backoff * 2, 0.5), MAX_BACKOFF_S)
            log.error("gateway worker %d (pid %d) exited (code %s); starting another", index, proc.pid, code)
            await asyncio.sleep(backoff)
            if not self._stopping:
                await self._spawn(index)

    async def stop(self) -> None:
        self._stopping = True
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        running = [proc for proc in self.processes.values() if proc.returncode is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(proc.wait() for proc in running)), STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            for proc in running:
                if proc.returncode is None:
                    proc.kill()
            await asyncio.gather(*(proc.wait() for proc in running))
