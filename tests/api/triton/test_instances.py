"""A tritonserver's model instances as its stub processes show them, and which of them were
lost between two looks (stand-in processes named as the real ones)."""

from __future__ import annotations

import os
import subprocess
import time

from embedgate.api.triton import instances
from embedgate.api.triton.instances import lost, running, stubs_of

from .test_stalls import IDLE, start_fake_triton, stop


async def test_each_stub_of_this_tritonserver_names_its_model_and_instance():
    triton, stub = await start_fake_triton(IDLE, instance="m_0_0")
    try:
        assert running(triton.pid) == {("m", "m_0_0")}
        (found,) = stubs_of(triton.pid)
        assert found.pid == stub and found.instance == "m_0_0"
        # Another parent's stubs are not this tritonserver's.
        assert running(stub) == set()
    finally:
        await stop(triton, stub)
    # The stub that reads a model's configuration runs no instance.
    reader, reader_stub = await start_fake_triton(IDLE, instance="m")
    try:
        assert running(reader.pid) == set() and stubs_of(reader.pid)[0].instance is None
    finally:
        await stop(reader, reader_stub)


def test_a_model_lost_an_instance_when_its_stub_is_gone_and_no_other_runs_it():
    before = {("m", "m_0_0"), ("m", "m_0_1"), ("n", "n_0_0")}
    assert lost(before, before) == set()
    assert lost(before, {("m", "m_0_0"), ("n", "n_0_0")}) == {"m"}
    assert lost(before, set()) == {"m", "n"}
    # A model newly loaded (more instances now) lost nothing.
    assert lost({("m", "m_0_0")}, before) == set()


def test_a_process_is_alive_until_it_exits_even_before_it_is_reaped():
    assert instances.alive(os.getpid())
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert instances.alive(child.pid)
        child.kill()
        # Dead, not yet reaped (a zombie): no longer alive.
        deadline = time.monotonic() + 10
        while instances.alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not instances.alive(child.pid)
        assert child.poll() is not None
    finally:
        child.kill()
        child.wait()
    assert not instances.alive(child.pid)


def _vm_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


async def test_a_models_stubs_resident_memory_is_what_proc_says_of_them():
    triton, stub = await start_fake_triton(IDLE, instance="m_0_0")
    try:
        held = instances.resident_by_model(triton.pid)
        assert set(held) == {"m"}
        assert abs(held["m"] - _vm_rss(stub)) < 1024 * 1024  # read moments apart
    finally:
        await stop(triton, stub)
    assert instances.resident_bytes(stub) is None  # gone
