"""What each loaded model holds in memory, measured from outside its processes.

Host memory: a Python-backend model's instances are stub processes, children of
tritonserver whose command line names the instance (``<model>_<group>_<index>``); the
backend reads their resident memory (RSS) from ``/proc``, summed by Triton model
(``Backend.host_memory``), each time it is asked (it grows as onnxruntime's arenas fill).
A part that runs inside tritonserver's own process (the native onnxruntime backend) has no
process of its own: its figure is how much tritonserver's resident memory grew over its
load, measured once then. A model the gateway computes itself (static weights) holds no
Triton memory and is counted as none. RSS counts the shared libraries each stub maps, so
the figures are what ``ps`` shows, a little more than the stubs would free together.

GPU memory: what the driver says each model's stubs hold on the GPU (``triton/device_memory.py``),
else what its GPU instances report to Triton's metrics (:func:`gpu_by_part`).
"""

from __future__ import annotations

import asyncio

from ..compute.backend.base import Backend, HostMemory
from ..compute.requests.served import ServedModel
from ..telemetry import scrape

# One look at tritonserver's memory (``Reading(None, {})``: nothing measured).
Reading = HostMemory


class MemoryMeter:
    """Reads the host memory of the server ``backend`` runs (blocking: off the event loop)."""

    def __init__(self, backend: Backend):
        self._backend = backend

    def read(self) -> Reading:
        return self._backend.host_memory() or Reading(None, {})


async def gpu_by_part(backend: Backend, models: list[ServedModel]) -> dict[str, int]:
    """GPU memory by Triton model: the driver's figures of its stubs (their CUDA contexts
    included: what unloading it frees) where it names them, else what its GPU instances
    report to Triton's metrics (their allocator's); empty where no model has GPU instances
    (nothing asked)."""
    if not any(model.metadata.gpu is not None for model in models):
        return {}
    text = await backend.metrics_text()
    reported = scrape.gpu_memory_by_model(text) if text else {}
    return {**reported, **(await asyncio.to_thread(backend.device_memory) or {})}


def model_bytes(parts: tuple[str, ...], reading: Reading, in_server: int) -> int:
    """A model's host memory: its parts' stubs, and what its parts in tritonserver's own
    process took at load (``in_server``)."""
    return sum(reading.parts.get(part, 0) for part in parts) + in_server


def grown_by(parts: tuple[str, ...], before: Reading, after: Reading) -> int:
    """What a load of ``parts`` added to tritonserver's own process, where some part has no
    stub (runs inside it); 0 where every part is a stub of its own."""
    if all(part in after.parts for part in parts) or before.server is None or after.server is None:
        return 0
    return max(0, after.server - before.server)
