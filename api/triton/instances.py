"""The model instances a tritonserver runs, seen from outside: each Python-backend
instance is a stub process, a child of tritonserver, whose command line names it
(``<model>_<group>_<index>``).

Triton does not notice a stub that dies: the model stays READY, the requests the stub held
are never answered, and the next ones fail with "Stub process ... is not healthy" until
the model is loaded again. So the supervisor looks at its Triton's stubs a few times a
second, and a model with an instance whose stub is gone (no other stub of that instance
running) has lost its process.
"""

from __future__ import annotations

import os
import re

from .orphans import STUB

_INSTANCE = re.compile(rb"(?P<model>.+)_\d+_\d+")


def running(triton_pid: int) -> set[tuple[str, str]]:
    """(Triton model, instance name) of every stub of this tritonserver running now."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                stat = stat_file.read()
        except OSError:
            continue
        if not argv or not argv[0].endswith(STUB.encode()) or len(argv) < 3:
            continue
        if int(stat.rsplit(b")", 1)[1].split()[1]) != triton_pid:
            continue
        # The instance name is the stub's last argument but one (the last is its kind).
        match = _INSTANCE.fullmatch(argv[-3] if argv[-1] == b"" else argv[-2])
        if match:
            found.add((match["model"].decode(), match[0].decode()))
    return found


def lost(before: set[tuple[str, str]], now: set[tuple[str, str]]) -> set[str]:
    """Triton models one of whose instances ran a stub at ``before`` and runs none now."""
    return {model for model, instance in before - now}
