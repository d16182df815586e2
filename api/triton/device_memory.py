"""The GPU's own figures of the memory each process holds on it, as the driver reports them
(``nvidia-smi --query-compute-apps``): what a process holds there, its CUDA context
included, which is what unloading the model its stub runs would free.

Read where a model has GPU instances, at loads, listings and scrapes (never per request),
blocking (a subprocess): off the event loop. Where the driver's tool is missing or fails, or
sees no process of this tritonserver (a container whose processes the driver names by other
pids), there are no figures, and the instances' own report stands in
(``telemetry/scrape.gpu_memory_by_model``).
"""

from __future__ import annotations

import logging
import shutil
import subprocess

from .instances import model_of_stub, stubs_of

log = logging.getLogger("embedgate.triton")
QUERY = ("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
TIMEOUT_S = 5.0
MIB = 1024 * 1024


def parse(text: str) -> dict[int, int]:
    """``nvidia-smi``'s lines (``pid, MiB``) as bytes by pid, summed where a process uses
    several GPUs; lines it could not measure ("[N/A]") left out."""
    used: dict[int, int] = {}
    for line in text.splitlines():
        pid, _, mib = (field.strip() for field in line.partition(","))
        if pid.isdigit() and mib.isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(mib) * MIB
    return used


def used_by_process() -> dict[int, int] | None:
    """Each process's memory on the GPUs, by pid; None where the driver's tool cannot say."""
    if shutil.which(QUERY[0]) is None:
        return None
    try:
        done = subprocess.run(QUERY, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        log.warning("nvidia-smi could not say the GPU memory of each process: %s", error)
        return None
    if done.returncode != 0:
        log.warning("nvidia-smi could not say the GPU memory of each process: %s", done.stderr.strip()[:200])
        return None
    return parse(done.stdout)


def device_by_model(triton_pid: int, used: dict[int, int]) -> dict[str, int]:
    """The GPU memory of this tritonserver's stubs, summed by the Triton model they run."""
    held: dict[str, int] = {}
    for stub in stubs_of(triton_pid):
        model = model_of_stub(stub)
        if model is not None and stub.pid in used:
            held[model] = held.get(model, 0) + used[stub.pid]
    return held
