"""A load whose stubs sit idle past the stub start-up timeout ends its tritonserver; a
busy stub, or no stub at all, is left alone."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest

from embedgate.api.settings import Settings
from embedgate.api.triton import stalls
from embedgate.api.triton.orphans import STUB
from embedgate.api.triton.stalls import is_idle, stub_cpu_seconds
from embedgate.api.triton.supervisor import TritonSupervisor

IDLE = "import time; time.sleep(60)"
BUSY = "while True: pass"

# A stand-in for tritonserver: starts one stub-like child (its command line names the
# instance "m_0_0", as Triton's Python backend does), prints the child's pid, and waits.
FAKE_TRITON = """
import subprocess, sys, time
code, instance = sys.argv[1], sys.argv[2]
stub = subprocess.Popen(
    ["bash", "-c", f'exec -a {STUB!r} {sys.executable} -c "{code}" model.py region 1048576 {instance} DEFAULT']
)
print(stub.pid, flush=True)
time.sleep(60)
"""


async def start_fake_triton(code: str, instance: str = "m_0_0") -> tuple[asyncio.subprocess.Process, int]:
    script = f"STUB = {STUB!r}\n{FAKE_TRITON}"
    triton = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, code, instance, stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    assert triton.stdout is not None
    stub = int((await triton.stdout.readline()).decode())
    deadline = time.monotonic() + 10
    while not open(f"/proc/{stub}/cmdline", "rb").read().startswith(STUB.encode()):
        assert time.monotonic() < deadline, "bash did not exec the fake stub"
        await asyncio.sleep(0.01)
    return triton, stub


async def settled(triton_pid: int) -> None:
    """Waits until the sleeping stub has finished starting Python (its start-up uses CPU
    that a busy machine may spread over the test's poll): its CPU the same over 0.2 s."""
    deadline = time.monotonic() + 30
    last = stub_cpu_seconds(triton_pid, "m")
    while True:
        await asyncio.sleep(0.2)
        now = stub_cpu_seconds(triton_pid, "m")
        if now == last:
            return
        assert time.monotonic() < deadline, "the sleeping stub never settled"
        last = now


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def stop(triton: asyncio.subprocess.Process, stub: int) -> None:
    for pid in (stub, triton.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    await triton.wait()


async def test_the_stubs_of_a_model_are_found_by_their_instance_name_and_parent():
    triton, stub = await start_fake_triton(IDLE)
    try:
        assert stub_cpu_seconds(triton.pid, "m") is not None
        # What a model instance's stub runs is named as "<model>_<group>_<index>", and the
        # first stub of a load runs the model itself, named as the model.
        model_stub, model_stub_pid = await start_fake_triton(IDLE, instance="m")
        try:
            assert stub_cpu_seconds(model_stub.pid, "m") is not None
        finally:
            await stop(model_stub, model_stub_pid)
        # Another model, one whose name the instance only starts with, another parent.
        assert stub_cpu_seconds(triton.pid, "other") is None
        assert stub_cpu_seconds(triton.pid, "m_0") is None
        assert stub_cpu_seconds(triton.pid, "m_0_0_0") is None
        assert stub_cpu_seconds(os.getpid(), "m") is None
    finally:
        await stop(triton, stub)


async def test_a_busy_stub_is_not_idle_and_a_sleeping_one_is():
    busy, busy_stub = await start_fake_triton(BUSY)
    idle, idle_stub = await start_fake_triton(IDLE)
    try:
        await settled(idle.pid)
        looks = [(stub_cpu_seconds(busy.pid, "m"), stub_cpu_seconds(idle.pid, "m"))]
        await asyncio.sleep(1.0)
        looks.append((stub_cpu_seconds(busy.pid, "m"), stub_cpu_seconds(idle.pid, "m")))
        assert not is_idle(looks[0][0], looks[1][0])
        assert is_idle(looks[0][1], looks[1][1])
    finally:
        await stop(busy, busy_stub)
        await stop(idle, idle_stub)


def test_no_stubs_at_either_look_is_not_idle():
    assert not is_idle(None, None)
    assert not is_idle(None, 1.0)
    assert not is_idle(1.0, None)


POLL_S = 0.5  # the tests' EMBEDGATE_TRITON_STALL_POLL_S


@pytest.fixture
def quick_looks(monkeypatch):
    monkeypatch.setattr(stalls, "EARLY_LOOK_S", 0.5)


def supervisor(tmp_path, triton: asyncio.subprocess.Process, stub_timeout_s: int = 1) -> TritonSupervisor:
    settings = Settings(
        model_repository=tmp_path, triton_stub_timeout_s=stub_timeout_s, triton_stall_poll_s=POLL_S,
        triton_stall_grace_s=0,
    )
    running = TritonSupervisor(settings, tmp_path)
    running.process.proc = triton
    return running


async def test_a_load_whose_stubs_are_idle_past_the_stub_timeout_ends_tritonserver(tmp_path, quick_looks, caplog):
    triton, stub = await start_fake_triton(IDLE)
    try:
        await asyncio.wait_for(supervisor(tmp_path, triton).watch_load("m"), 30)
        # Its stub with it: the whole process group.
        assert await asyncio.wait_for(triton.wait(), 10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while alive(stub):
            assert time.monotonic() < deadline, "the stub outlived its tritonserver"
            await asyncio.sleep(0.05)
        assert "a stub handshake that hangs; restarting tritonserver" in caplog.text
    finally:
        await stop(triton, stub)


async def test_stubs_idle_for_several_polls_end_tritonserver_long_before_the_stub_timeout(tmp_path, quick_looks, caplog):
    triton, stub = await start_fake_triton(IDLE)
    try:
        # A 300-s stub timeout: the hang is seen after the early look and IDLE_POLLS idle polls.
        watch = supervisor(tmp_path, triton, stub_timeout_s=300).watch_load("m")
        await asyncio.wait_for(watch, 30)
        assert await asyncio.wait_for(triton.wait(), 10) == -signal.SIGKILL
        assert f"stubs have been idle for {stalls.IDLE_POLLS * POLL_S:.0f}s" in caplog.text
    finally:
        await stop(triton, stub)


@pytest.mark.parametrize("code, model", [(BUSY, "m"), (IDLE, "another")], ids=["busy stub", "no stub of the model"])
async def test_a_load_with_a_busy_stub_or_none_is_left_alone(tmp_path, quick_looks, code, model):
    triton, stub = await start_fake_triton(code)
    try:
        watch = asyncio.create_task(supervisor(tmp_path, triton).watch_load(model))
        # Its first look comes after the 1-s stub timeout; then five polls.
        done, _ = await asyncio.wait([watch], timeout=1.0 + 5 * POLL_S)
        assert not done
        assert triton.returncode is None
        watch.cancel()
    finally:
        await stop(triton, stub)


async def test_a_load_past_its_deadline_ends_tritonserver_even_with_busy_stubs(tmp_path, caplog):
    triton, stub = await start_fake_triton(BUSY)
    try:
        running = TritonSupervisor(
            Settings(model_repository=tmp_path, triton_stub_timeout_s=300, triton_load_timeout_s=1.0), tmp_path
        )
        running.process.proc = triton
        started = time.monotonic()
        await asyncio.wait_for(running.watch_load("m"), 30)
        assert time.monotonic() - started < 10
        assert await asyncio.wait_for(triton.wait(), 10) == -signal.SIGKILL
        assert "has not finished loading m in 1s (EMBEDGATE_TRITON_LOAD_TIMEOUT_S)" in caplog.text
    finally:
        await stop(triton, stub)
