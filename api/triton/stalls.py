"""A model load that Triton never finishes.

Under CPU pressure the Python backend's start-up handshake with a model instance's stub
can end with each side waiting for the other: tritonserver gives up on the stub and
waits for it to exit, while the stub, started and idle, waits for a message from
tritonserver. The load then never returns (seen with gdb on a busy 2-core machine; at
other times the same handshake ends in tritonserver aborting). From outside it looks
like this: the load is still pending, and the model's stubs, children of this
tritonserver, use no CPU. A stub that loads a model is busy (even on a starved machine it
gets its share of a core), so one idle for several polls in a row is stuck, and the only
way out is a new tritonserver. The stub start-up timeout is long, for slow starts on a busy
machine, so the hang is not waited out until then: the first look comes after
``EARLY_LOOK_S``, and ``IDLE_POLLS`` idle polls in a row end it (one, past the timeout and
its grace, ``EMBEDGATE_TRITON_STALL_GRACE_S``, where Triton's own handling of a stub that
did not start has come first). A poll is ``EMBEDGATE_TRITON_STALL_POLL_S``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from collections.abc import Callable

from ..settings import Settings
from .instances import stubs_of

log = logging.getLogger("embedgate.triton")

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# The first look at a pending load (a load on a busy machine takes tens of seconds).
EARLY_LOOK_S = 60.0
# Stubs of the loading model that together use less CPU than this over one poll are idle.
IDLE_CPU_S = 0.05
# Idle polls in a row that end a load before the stub start-up timeout.
IDLE_POLLS = 3


def _instance_pattern(triton_name: str) -> re.Pattern[bytes]:
    # A stub's command line names what it runs: one of the model's instances,
    # "<model>_<group>_<index>", or the model itself (the stub an external Triton run
    # without --disable-auto-complete-config starts first, to complete the configuration).
    return re.compile(re.escape(triton_name.encode()) + rb"(_\d+_\d+)?")


def stub_cpu_seconds(triton_pid: int, triton_name: str) -> float | None:
    """CPU seconds used so far by the stubs of ``triton_name`` that this tritonserver
    started; None when it has none."""
    instance = _instance_pattern(triton_name)
    ticks = [stub.cpu_ticks for stub in stubs_of(triton_pid) if any(instance.fullmatch(arg) for arg in stub.argv[1:])]
    return sum(ticks) / _TICKS_PER_S if ticks else None


def is_idle(before: float | None, after: float | None) -> bool:
    """Whether the stubs seen at two looks one poll apart did (almost) nothing between them."""
    return before is not None and after is not None and after - before < IDLE_CPU_S


async def end_a_hung_load(
    current: Callable[[], asyncio.subprocess.Process | None], triton_name: str, settings: Settings
) -> None:
    """Run beside a load of ``triton_name`` in the tritonserver ``current`` gives: when the
    load is still pending past ``EMBEDGATE_TRITON_LOAD_TIMEOUT_S``, or the model's stubs sit
    idle while it is (a stub handshake that hangs), kill that tritonserver; the watchdog
    starts a new one, and the load fails as if Triton had died under it (the registry then
    makes it once more). Returns only after killing it, or once it is no longer the one
    running."""
    proc = current()
    if proc is None:
        return
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + settings.triton_load_timeout_s
    poll_s = settings.triton_stall_poll_s
    timed_out_at = started + settings.triton_stub_timeout_s + settings.triton_stall_grace_s
    next_look = min(started + EARLY_LOOK_S, timed_out_at)
    before, idle_polls = None, 0
    while True:
        await asyncio.sleep(max(0.0, min(next_look, deadline) - loop.time()))
        if proc.returncode is not None or proc is not current():
            return
        if loop.time() >= deadline:
            log.error(
                "tritonserver has not finished loading %s in %.0fs (EMBEDGATE_TRITON_LOAD_TIMEOUT_S): "
                "a load that hangs; restarting tritonserver",
                triton_name,
                settings.triton_load_timeout_s,
            )
            break
        now = await asyncio.to_thread(stub_cpu_seconds, proc.pid, triton_name)
        idle_polls = idle_polls + 1 if is_idle(before, now) else 0
        if idle_polls >= (1 if loop.time() >= timed_out_at else IDLE_POLLS):
            log.error(
                "tritonserver has not finished loading %s, and the model's stubs have been idle for %.0fs: "
                "a stub handshake that hangs; restarting tritonserver",
                triton_name,
                idle_polls * poll_s,
            )
            break
        before = now
        next_look = loop.time() + poll_s
    # Its stubs too (they share its process group): a stuck one may never notice that
    # its parent is gone, and would hold Triton's output open.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
