"""The GPU's own figures of each model's memory: the driver's per-process figures (a stand-in
``nvidia-smi`` on PATH, answering as the real one does) of a tritonserver's stubs (stand-in
processes named as the real ones), summed by model; none where the driver cannot say."""

from __future__ import annotations

import stat

from embedgate.api.triton import device_memory
from embedgate.api.triton.device_memory import MIB, device_by_model, parse, used_by_process

from .test_stalls import IDLE, start_fake_triton, stop


def fake_nvidia_smi(directory, monkeypatch, output: str, code: int = 0) -> None:
    tool = directory / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n[ \"$1\" = \"{device_memory.QUERY[1]}\" ] || exit 9\nprintf '{output}'\nexit {code}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{directory}:/usr/bin:/bin")


def test_the_drivers_lines_are_bytes_by_process_summed_over_gpus():
    text = "123, 512\n456, 1024\n123, 256\n789, [N/A]\n"
    assert parse(text) == {123: 768 * MIB, 456: 1024 * MIB}
    assert parse("") == {}


def test_without_the_drivers_tool_or_when_it_fails_there_are_no_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert used_by_process() is None
    fake_nvidia_smi(tmp_path, monkeypatch, "NVIDIA-SMI has failed", code=9)
    assert used_by_process() is None
    fake_nvidia_smi(tmp_path, monkeypatch, "10, 300\\n")
    assert used_by_process() == {10: 300 * MIB}


async def test_a_models_gpu_memory_is_its_stubs_as_the_driver_reports_them():
    triton, stub = await start_fake_triton(IDLE, instance="m_0_0")
    try:
        used = {stub: 700 * MIB, triton.pid: 300 * MIB, 1: 5 * MIB}
        # tritonserver's own and other processes' memory is no model's.
        assert device_by_model(triton.pid, used) == {"m": 700 * MIB}
        assert device_by_model(triton.pid, {}) == {}
    finally:
        await stop(triton, stub)
