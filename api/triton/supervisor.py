"""Runs tritonserver: starts it, watches it, restarts it, and stops it without leftovers.

Embedded mode starts the bundled binary bound to 127.0.0.1 in its own process group,
with ``PR_SET_PDEATHSIG`` so it dies with the gateway. External mode starts nothing and
only reports the configured URL.

Shutdown traps handled here (measured): with keep-alive connections open, SIGTERM waits
the exit timeout and then segfaults, leaving Python stub processes and ``/dev/shm``
segments behind. So callers close their clients first, and ``stop`` kills the whole
process group and removes this run's shared-memory segments.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import shutil
import signal
import tempfile
import time
import uuid

import httpx

from embedgate.contract.repository import is_s3, open_repository, parse_s3, triton_location

from ..settings import Settings
from . import bundle, instances, stalls
from .children import tied_to_parent
from .command import PortTaken, Ports, build_command, choose_ports, chosen_freely, log_level, taken_port
from .orphans import reap_orphaned_stubs, remove_orphaned_downloads
from .watches import LostListener, RestartListener, Watches

log = logging.getLogger("embedgate.triton")
triton_log = logging.getLogger("embedgate.tritonserver")

# Starts on new free ports, at most, where a port picked free was taken first.
PORT_TRIES = 3


def _shm_family(pid: int) -> str:
    """The shared-memory prefix shared by every Triton one gateway process starts."""
    return f"embedgate_{pid}_"


class TritonSupervisor(Watches):
    """An embedded tritonserver process and its watchdog."""

    def __init__(self, settings: Settings, repository: str | os.PathLike[str]):
        self.settings = settings
        # A directory's absolute path or an s3:// URL, as --model-repository takes it.
        self.repository = triton_location(repository)
        self._remote = is_s3(self.repository)
        # S3: where this run's Triton downloads the models it loads.
        self._mount: str | None = None
        self.ports: Ports | None = None
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._shm_prefix = ""
        self._stopping = False
        self._ready = False
        # Set while Triton runs with its models loaded; cleared from its exit until the
        # restart listeners have reloaded them.
        self._serving = asyncio.Event()
        self._watch_task: asyncio.Task | None = None
        self._log_task: asyncio.Task | None = None
        self._listeners: list[RestartListener] = []
        self._lost_listeners: list[LostListener] = []
        self._stub_task: asyncio.Task | None = None
        self._told: set[asyncio.Task] = set()
        self._prepared: bundle.PreparedTriton | None = None
        # The port tritonserver's output said was taken, since its last start.
        self._taken_port: int | None = None

    # --- what the rest of the gateway sees
    embedded = True

    @property
    def url(self) -> str:
        assert self.ports is not None, "supervisor not started"
        return f"127.0.0.1:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        assert self.ports is not None, "supervisor not started"
        return f"127.0.0.1:{self.ports.grpc}"

    @property
    def metrics_url(self) -> str:
        assert self.ports is not None, "supervisor not started"
        return f"http://127.0.0.1:{self.ports.metrics}/metrics"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc and self._proc.returncode is None else None

    def is_ready(self) -> bool:
        return self._ready

    @property
    def serving(self) -> bool:
        """Triton runs with its models loaded (false from its death until they are back)."""
        return self._serving.is_set()

    def on_restart(self, listener: RestartListener) -> None:
        self._listeners.append(listener)

    def on_lost_process(self, listener: LostListener) -> None:
        self._lost_listeners.append(listener)

    async def wait_restarted(self, since: int) -> bool:
        """After a lost connection: wait until the watchdog has restarted Triton (counted
        past ``since``) and reloaded its models. False when Triton never went away: it
        still runs, serving, 2 s on. A tritonserver that died is waited for however long
        the watchdog takes to see it (on a starved machine, seconds): the request's
        deadline bounds the wait."""
        noticed = time.monotonic() + 2.0
        while self.restarts == since and not self._stopping:
            if self._serving.is_set() and time.monotonic() > noticed and self._running():
                return False
            await asyncio.sleep(0.05)
        return await self.wait_serving()

    async def wait_serving(self) -> bool:
        """Wait until Triton runs with its models loaded; False when it is being stopped."""
        if self._stopping:
            return False
        await self._serving.wait()
        return True

    def _running(self) -> bool:
        proc = self._proc
        return proc is not None and proc.returncode is None and instances.alive(proc.pid)

    async def watch_load(self, triton_name: str) -> None:
        """Run beside a load of ``triton_name``: when the load is still pending past
        ``EMBEDGATE_TRITON_LOAD_TIMEOUT_S``, or the model's stubs sit idle while it is (a
        stub handshake that hangs, see ``stalls``), kill this tritonserver; the watchdog
        starts a new one, and the load fails as if Triton had died under it (the registry
        then makes it once more). Returns only after killing it."""
        proc = self._proc
        if proc is None:
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.settings.triton_load_timeout_s
        timed_out_at = started + self.settings.triton_stub_timeout_s + stalls.GRACE_S
        next_look = started + min(stalls.EARLY_LOOK_S, self.settings.triton_stub_timeout_s + stalls.GRACE_S)
        before, idle_polls = None, 0
        while True:
            await asyncio.sleep(max(0.0, min(next_look, deadline) - loop.time()))
            if proc.returncode is not None or proc is not self._proc:
                return
            if loop.time() >= deadline:
                log.error(
                    "tritonserver has not finished loading %s in %.0fs (EMBEDGATE_TRITON_LOAD_TIMEOUT_S): "
                    "a load that hangs; restarting tritonserver",
                    triton_name,
                    self.settings.triton_load_timeout_s,
                )
                break
            now = await asyncio.to_thread(stalls.stub_cpu_seconds, proc.pid, triton_name)
            idle_polls = idle_polls + 1 if stalls.is_idle(before, now) else 0
            if idle_polls >= (1 if loop.time() >= timed_out_at else stalls.IDLE_POLLS):
                log.error(
                    "tritonserver has not finished loading %s, and the model's stubs have been idle for %.0fs: "
                    "a stub handshake that hangs; restarting tritonserver",
                    triton_name,
                    idle_polls * stalls.POLL_S,
                )
                break
            before = now
            next_look = loop.time() + stalls.POLL_S
        # Its stubs too (they share its process group): a stuck one may never notice that
        # its parent is gone, and would hold Triton's output open.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # --- lifecycle
    async def start(self) -> None:
        self._prepared = await asyncio.to_thread(
            bundle.prepare, self.settings.triton_work_dir, self.settings.triton_stub_python
        )
        await asyncio.to_thread(reap_orphaned_stubs)
        repository = open_repository(self.repository, self.settings.repository_cache)
        await asyncio.to_thread(repository.create)
        if self._remote:
            await asyncio.to_thread(remove_orphaned_downloads)
        self.ports = choose_ports(self.settings)
        await self._spawn_on_free_ports()
        self._serving.set()
        self._watch_task = asyncio.create_task(self._watch(), name="triton-watchdog")
        self._stub_task = asyncio.create_task(self._watch_stubs(), name="triton-stub-watch")

    async def stop(self) -> None:
        """Stop Triton. Close every client of it before calling this."""
        self._stopping = True
        self._ready = False
        for task in (self._watch_task, self._stub_task):
            if task:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._terminate(graceful=True)

    # --- internals
    async def _spawn_on_free_ports(self) -> None:
        """The first start: where a port picked free was taken before Triton bound it, on
        other free ones (a few times at most)."""
        for attempt in range(1, PORT_TRIES + 1):
            try:
                return await self._spawn()
            except PortTaken as taken:
                if attempt == PORT_TRIES or not chosen_freely(self.settings, taken.port):
                    raise
                log.warning("%s; starting it on other free ports", taken)
                self.ports = choose_ports(self.settings)

    async def _spawn(self) -> None:
        assert self._prepared is not None and self.ports is not None
        self._shm_prefix = f"{_shm_family(os.getpid())}{uuid.uuid4().hex[:6]}_"
        command = build_command(self._prepared, self.repository, self.ports, self._shm_prefix, self.settings)
        log.info("starting tritonserver %s on %s", self._prepared.version, self.url)
        self._proc = await asyncio.create_subprocess_exec(
            *tied_to_parent(command),
            env=self._environment(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        self._taken_port = None
        self._log_task = asyncio.create_task(self._forward_log(self._proc))
        try:
            await self._wait_ready(self._proc)
        except BaseException:
            await self._terminate(graceful=False)  # its stubs, shared memory and downloads too
            raise
        self._ready = True
        log.info("tritonserver ready (pid %d)", self._proc.pid)

    def _environment(self) -> dict[str, str]:
        """Triton's environment: the gateway's (so the AWS_* credentials reach it, and
        nothing here repeats them), plus for S3 the region and a download directory of
        this run's own, removed when it stops (Triton leaves its downloads behind when
        killed)."""
        assert self._prepared is not None
        if not self._remote:
            return self._prepared.env
        from embedgate.contract.repository.s3_client import triton_environment

        self._mount = tempfile.mkdtemp(prefix=f"{self._shm_prefix}s3-")
        return {
            **self._prepared.env,
            **triton_environment(parse_s3(self.repository)),
            "TRITON_AWS_MOUNT_DIRECTORY": self._mount,
        }

    async def _wait_ready(self, proc: asyncio.subprocess.Process) -> None:
        deadline = time.monotonic() + self.settings.triton_startup_timeout_s
        ready_url = f"http://{self.url}/v2/health/ready"
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if proc.returncode is not None:
                    if self._log_task:  # its last lines say why
                        await asyncio.wait([self._log_task], timeout=2)
                    if self._taken_port is not None:
                        raise PortTaken(self._taken_port, proc.returncode)
                    raise RuntimeError(f"tritonserver exited during startup (code {proc.returncode})")
                try:
                    if (await client.get(ready_url)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError("tritonserver did not become ready in time")

    async def _forward_log(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if not line:
                continue
            self._taken_port = taken_port(line) or self._taken_port
            triton_log.log(log_level(line), "%s", line)

    async def _terminate(self, graceful: bool) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            try:
                proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
                await asyncio.wait_for(proc.wait(), self.settings.triton_exit_timeout_s + 2)
            except (ProcessLookupError, asyncio.TimeoutError):
                pass
        if proc is not None:
            # Python backend stubs share Triton's process group: take them all.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if proc.returncode is None:
                await proc.wait()
        if self._log_task:
            await asyncio.gather(self._log_task, return_exceptions=True)
            self._log_task = None
        # Stopping: every segment any of this gateway's Tritons made (a stub killed
        # mid-creation during a restart can leave one behind); restarting: this run's.
        prefix = _shm_family(os.getpid()) if self._stopping else self._shm_prefix
        for segment in glob.glob(f"/dev/shm/{glob.escape(prefix)}*") if prefix else []:
            try:
                os.unlink(segment)
            except OSError:
                pass
        if self._mount:
            shutil.rmtree(self._mount, ignore_errors=True)
            self._mount = None
