"""One tritonserver process at a time: prepared, spawned on free ports, waited for, its
output logged, and ended without leftovers.

It starts the bundled binary bound to 127.0.0.1 in its own process group, with
``PR_SET_PDEATHSIG`` so it dies with the gateway. Shutdown traps handled here (measured):
with keep-alive connections open, SIGTERM waits the exit timeout and then segfaults,
leaving Python stub processes and ``/dev/shm`` segments behind. So callers close their
clients first, and :meth:`TritonProcess.terminate` kills the whole process group and
removes the shared-memory segments.
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

from ..children import tied_to_parent
from ..settings import Settings
from . import bundle
from .command import PortTaken, Ports, build_command, choose_ports, chosen_freely, log_level, taken_port
from .orphans import reap_orphaned_stubs, remove_orphaned_downloads

log = logging.getLogger("embedgate.triton")
triton_log = logging.getLogger("embedgate.tritonserver")

# Starts on new free ports, at most, where a port picked free was taken first.
PORT_TRIES = 3
# How often a process is looked at for its exit.
EXIT_POLL_S = 0.1


def shm_family(pid: int) -> str:
    """The shared-memory prefix shared by every Triton one gateway process starts."""
    return f"embedgate_{pid}_"


class TritonProcess:
    """The tritonserver of one gateway process: each start a new process on the same ports
    (its clients know them), after the first, which picks free ones."""

    def __init__(self, settings: Settings, repository: str | os.PathLike[str]):
        self.settings = settings
        # A directory's absolute path or an s3:// URL, as --model-repository takes it.
        self.repository = triton_location(repository)
        self.remote = is_s3(self.repository)
        self.ports: Ports | None = None
        # Ready since its last start, until it exits or is ended.
        self.ready = False
        self.proc: asyncio.subprocess.Process | None = None
        # S3: where this run's Triton downloads the models it loads.
        self.mount: str | None = None
        self.shm_prefix = ""
        self.prepared: bundle.PreparedTriton | None = None
        self.log_task: asyncio.Task | None = None
        # The port tritonserver's output said was taken, since its last start.
        self.taken_port: int | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.returncode is None else None

    async def prepare(self) -> None:
        """Before the first start: the bundled binary in place, what an earlier run left
        behind removed, the repository created, the ports chosen."""
        self.prepared = await asyncio.to_thread(
            bundle.prepare, self.settings.triton_work_dir, self.settings.triton_stub_python
        )
        await asyncio.to_thread(reap_orphaned_stubs)
        repository = open_repository(self.repository, self.settings.repository_cache)
        await asyncio.to_thread(repository.create)
        if self.remote:
            await asyncio.to_thread(remove_orphaned_downloads)
        self.ports = choose_ports(self.settings)

    async def spawn_on_free_ports(self) -> None:
        """The first start: where a port picked free was taken before Triton bound it, on
        other free ones (a few times at most)."""
        for attempt in range(1, PORT_TRIES + 1):
            try:
                return await self.spawn()
            except PortTaken as taken:
                if attempt == PORT_TRIES or not chosen_freely(self.settings, taken.port):
                    raise
                log.warning("%s; starting it on other free ports", taken)
                self.ports = choose_ports(self.settings)

    async def spawn(self) -> None:
        """Start a tritonserver and wait until it is ready (ended, with what it left, if it
        is not)."""
        assert self.prepared is not None and self.ports is not None
        self.shm_prefix = f"{shm_family(os.getpid())}{uuid.uuid4().hex[:6]}_"
        command = build_command(self.prepared, self.repository, self.ports, self.shm_prefix, self.settings)
        log.info("starting tritonserver %s on 127.0.0.1:%d", self.prepared.version, self.ports.http)
        self.proc = await asyncio.create_subprocess_exec(
            *tied_to_parent(command),
            env=self._environment(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        self.taken_port = None
        self.log_task = asyncio.create_task(self.forward_log(self.proc))
        try:
            await self.wait_ready(self.proc)
        except BaseException:
            await self.terminate(graceful=False)  # its stubs, shared memory and downloads too
            raise
        self.ready = True
        log.info("tritonserver ready (pid %d)", self.proc.pid)

    async def exited(self) -> int:
        """The running process's exit code, as soon as it has exited. ``Process.wait()``
        also waits until the output pipe closes, which a stub that outlived tritonserver
        (in its process group, never told its parent is gone) holds open: seen after a model
        was unloaded and loaded again, a killed tritonserver was then never restarted."""
        proc = self.proc
        assert proc is not None
        while proc.returncode is None:
            await asyncio.sleep(EXIT_POLL_S)
        return proc.returncode

    def _environment(self) -> dict[str, str]:
        """Triton's environment: the gateway's (so the AWS_* credentials reach it, and
        nothing here repeats them), plus for S3 the region and a download directory of
        this run's own, removed when it stops (Triton leaves its downloads behind when
        killed)."""
        assert self.prepared is not None
        if not self.remote:
            return self.prepared.env
        from embedgate.contract.repository.s3_client import triton_environment

        self.mount = tempfile.mkdtemp(prefix=f"{self.shm_prefix}s3-")
        return {
            **self.prepared.env,
            **triton_environment(parse_s3(self.repository)),
            "TRITON_AWS_MOUNT_DIRECTORY": self.mount,
        }

    async def wait_ready(self, proc: asyncio.subprocess.Process) -> None:
        assert self.ports is not None
        deadline = time.monotonic() + self.settings.triton_startup_timeout_s
        ready_url = f"http://127.0.0.1:{self.ports.http}/v2/health/ready"
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if proc.returncode is not None:
                    if self.log_task:  # its last lines say why
                        await asyncio.wait([self.log_task], timeout=2)
                    if self.taken_port is not None:
                        raise PortTaken(self.taken_port, proc.returncode)
                    raise RuntimeError(f"tritonserver exited during startup (code {proc.returncode})")
                try:
                    if (await client.get(ready_url)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError("tritonserver did not become ready in time")

    async def forward_log(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if not line:
                continue
            self.taken_port = taken_port(line) or self.taken_port
            triton_log.log(log_level(line), "%s", line)

    async def terminate(self, graceful: bool, *, last: bool = False) -> None:
        """End the process, its stubs and what they leave behind. ``last``: the gateway is
        stopping, so every segment any of its Tritons made goes (a stub killed mid-creation
        during a restart can leave one behind); else this run's."""
        self.ready = False
        proc = self.proc
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
        if self.log_task:
            await asyncio.gather(self.log_task, return_exceptions=True)
            self.log_task = None
        prefix = shm_family(os.getpid()) if last else self.shm_prefix
        for segment in glob.glob(f"/dev/shm/{glob.escape(prefix)}*") if prefix else []:
            try:
                os.unlink(segment)
            except OSError:
                pass
        if self.mount:
            shutil.rmtree(self.mount, ignore_errors=True)
            self.mount = None
