"""Whether this host serves on a GPU: an NVIDIA GPU the driver shows, and PyTorch with
CUDA in this environment (what the Python-backend model runs GPU instances with).

The gateway never imports torch: the check runs once, in a subprocess, and only where the
driver shows a GPU, so a CPU host pays nothing.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
DEVICE_DIR = Path("/dev")
TORCH_CHECK_TIMEOUT_S = 120
_TORCH_CHECK = "import sys, torch; sys.exit(0 if torch.cuda.is_available() and torch.cuda.device_count() else 3)"


def driver_gpus(driver_dir: Path = DRIVER_GPUS, device_dir: Path = DEVICE_DIR) -> int:
    """GPUs the NVIDIA driver shows this process (0 where CUDA_VISIBLE_DEVICES hides them)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return 0
    try:
        count = sum(1 for entry in driver_dir.iterdir() if entry.is_dir())
    except OSError:
        count = 0
    if not count:
        try:
            count = sum(1 for entry in device_dir.iterdir() if re.fullmatch(r"nvidia\d+", entry.name))
        except OSError:
            count = 0
    return count


def torch_sees_cuda(python: str = sys.executable) -> bool:
    try:
        return subprocess.run(
            [python, "-c", _TORCH_CHECK], capture_output=True, timeout=TORCH_CHECK_TIMEOUT_S
        ).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def available() -> bool:
    """A GPU to serve on: the driver shows one and PyTorch here can use it (checked once)."""
    return driver_gpus() > 0 and torch_sees_cuda()
