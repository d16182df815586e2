"""A tritonserver's model instances as its stub processes show them, and which of them were
lost between two looks (stand-in processes named as the real ones)."""

from __future__ import annotations

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
