"""GPU detection: the driver's GPUs (hidden by CUDA_VISIBLE_DEVICES), then PyTorch's view,
checked in a subprocess only where the driver shows one."""

from __future__ import annotations

import sys

import pytest

from embedgate.api.triton import gpus


@pytest.fixture
def driver(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    proc, dev = tmp_path / "gpus", tmp_path / "dev"
    proc.mkdir()
    dev.mkdir()
    return proc, dev


def test_the_drivers_gpu_folders_are_counted(driver):
    proc, dev = driver
    assert gpus.driver_gpus(proc, dev) == 0
    (proc / "0000:00:05.0").mkdir()
    (proc / "0000:00:06.0").mkdir()
    assert gpus.driver_gpus(proc, dev) == 2


def test_device_nodes_count_where_the_driver_folder_is_missing(driver):
    proc, dev = driver
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    assert gpus.driver_gpus(proc / "missing", dev) == 2


@pytest.mark.parametrize("hidden", ["", "-1"])
def test_cuda_visible_devices_can_hide_every_gpu(driver, monkeypatch, hidden):
    proc, dev = driver
    (proc / "0000:00:05.0").mkdir()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
    assert gpus.driver_gpus(proc, dev) == 0


def test_torch_is_asked_in_a_subprocess_and_a_failing_interpreter_means_no(tmp_path):
    assert gpus.torch_sees_cuda(str(tmp_path / "no-python")) is False
    # This environment's torch answers for itself (CPU build here: False; a CUDA host: True).
    import torch

    assert gpus.torch_sees_cuda(sys.executable) is (torch.cuda.is_available() and torch.cuda.device_count() > 0)


def test_no_driver_gpu_means_no_subprocess(monkeypatch):
    gpus.available.cache_clear()
    monkeypatch.setattr(gpus, "driver_gpus", lambda: 0)
    monkeypatch.setattr(gpus, "torch_sees_cuda", lambda: pytest.fail("torch must not be asked"))
    try:
        assert gpus.available() is False
    finally:
        gpus.available.cache_clear()
