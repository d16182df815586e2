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
from dataclasses import dataclass

from .orphans import STUB

_INSTANCE = re.compile(rb"(?P<model>.+)_\d+_\d+")


@dataclass(frozen=True)
class Stub:
    pid: int
    # Its command line: what it runs (the model, or an instance of it) is among its arguments.
    argv: list[bytes]
    # CPU time it has used, in clock ticks.
    cpu_ticks: int

    @property
    def instance(self) -> str | None:
        """The instance it runs (``<model>_<group>_<index>``): its last argument but one
        (the last is its kind); None for the stub that reads a model's configuration."""
        args = self.argv[:-1] if self.argv[-1:] == [b""] else self.argv
        return args[-2].decode() if len(args) >= 3 and _INSTANCE.fullmatch(args[-2]) else None


def _stat_fields(stat: bytes) -> list[bytes]:
    """A /proc stat line's fields after the command name, which may hold spaces: state,
    ppid, ..., utime, stime."""
    return stat.rsplit(b")", 1)[1].split()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: not gone, and not dead but not yet reaped (a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            state = _stat_fields(stat_file.read())[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def stubs_of(triton_pid: int) -> list[Stub]:
    """The Python-backend stubs this tritonserver started, running now."""
    found = []
    for entry in _children(triton_pid):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                stat = stat_file.read()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if not argv or not argv[0].endswith(STUB.encode()):
            continue
        fields = _stat_fields(stat)
        if int(fields[1]) == triton_pid:
            found.append(Stub(int(entry), argv, int(fields[11]) + int(fields[12])))
    return found


def _children(pid: int) -> list[str]:
    """The processes ``pid`` started: its threads' ``children`` files (read twice a second
    while Triton serves, so not a scan of every process on the host), or, where the
    kernel has no such files, every process (the caller checks the parent)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    children: list[str] = []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", "rb") as listed:
                children += listed.read().decode().split()
        except FileNotFoundError:
            return [entry for entry in os.listdir("/proc") if entry.isdigit()]
        except OSError:
            continue  # the thread ended meanwhile
    return children


def running(triton_pid: int) -> set[tuple[str, str]]:
    """(Triton model, instance name) of every stub of this tritonserver running now."""
    found = set()
    for stub in stubs_of(triton_pid):
        instance = stub.instance
        if instance is not None:
            found.add((_INSTANCE.fullmatch(instance.encode())["model"].decode(), instance))
    return found


def resident_bytes(pid: int) -> int | None:
    """Process ``pid``'s resident memory (VmRSS), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def model_of_stub(stub: Stub) -> str | None:
    """The Triton model a stub's instance belongs to."""
    if stub.instance is None:
        return None
    return _INSTANCE.fullmatch(stub.instance.encode())["model"].decode()


def resident_by_model(triton_pid: int) -> dict[str, int]:
    """The resident memory of this tritonserver's stubs, summed by the Triton model they run."""
    held: dict[str, int] = {}
    for stub in stubs_of(triton_pid):
        rss = resident_bytes(stub.pid)
        model = model_of_stub(stub)
        if model is not None and rss is not None:
            held[model] = held.get(model, 0) + rss
    return held


def lost(before: set[tuple[str, str]], now: set[tuple[str, str]]) -> set[str]:
    """Triton models one of whose instances ran a stub at ``before`` and runs none now."""
    return {model for model, instance in before - now}
