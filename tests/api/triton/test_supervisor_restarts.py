"""A request that lost its connection waits for the restart of a tritonserver that died,
however late the watchdog sees it, and gives up at once on one that still runs."""

from __future__ import annotations

import asyncio
import subprocess

from embedgate.api.settings import Settings
from embedgate.api.triton.supervisor import TritonSupervisor


class _Proc:
    def __init__(self, pid: int):
        self.pid = pid
        self.returncode = None


async def test_a_running_triton_that_serves_means_it_never_went_away(tmp_path):
    supervisor = TritonSupervisor(Settings(), tmp_path)
    child = subprocess.Popen(["sleep", "30"])
    try:
        supervisor.process.proc = _Proc(child.pid)
        supervisor.watchdog.serving.set()
        assert await asyncio.wait_for(supervisor.wait_restarted(0), 10) is False
    finally:
        child.kill()
        child.wait()


async def test_a_dead_triton_not_yet_seen_by_the_watchdog_is_waited_for(tmp_path):
    supervisor = TritonSupervisor(Settings(), tmp_path)
    child = subprocess.Popen(["sleep", "30"])
    child.kill()  # dead, not reaped: the watchdog has not seen it yet
    try:
        supervisor.process.proc = _Proc(child.pid)
        supervisor.watchdog.serving.set()
        waiting = asyncio.create_task(supervisor.wait_restarted(0))
        await asyncio.sleep(3.0)  # past the 2 s in which a running Triton counts as never gone
        assert not waiting.done()
        # The watchdog restarts it and reloads the models.
        supervisor.watchdog.serving.clear()
        supervisor.watchdog.restarts += 1
        supervisor.watchdog.serving.set()
        assert await asyncio.wait_for(waiting, 5) is True
    finally:
        child.wait()
