"""The server's processes, read from /proc: who they are, their memory, their CPU time.

The server is the process listening on the benchmarked port (``embedgate serve``) or the
PIDs given with ``--server-pid``, plus all their descendants: the embedded tritonserver
and its Python-backend stubs, which run the model. Processes whose name starts with
``triton`` count as Triton, the rest as the gateway.

Memory is the proportional set size (PSS, from ``smaps_rollup``): pages shared between
processes (Triton and its stubs share memory segments) are split among them, so the sum
over the tree counts each page once. Where PSS cannot be read, resident size (RSS) is
used instead and the report says so.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK")
_LISTEN = "0A"


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    name: str
    memory_kb: int
    cpu_s: float
    memory_kind: str  # "pss" or "rss"

    # "worker N" for a gateway worker of ``embedgate serve --workers N``, else "".
    part: str = ""

    @property
    def role(self) -> str:
        return "triton" if self.name.startswith("triton") else "gateway"

    @property
    def label(self) -> str:
        """Who the process is: ``gateway worker 0``, ``gateway`` (a single gateway, or the
        primary of workers), ``tritonserver``, ``triton_python_backend_stub``."""
        if self.part or self.role == "gateway":
            return self.part or "gateway"
        return "triton stubs" if self.name.startswith("triton_python") else self.name


WORKER_MODULE = b"embedgate.api.workers.worker"


def _part(pid: int) -> str:
    try:
        args = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    if WORKER_MODULE in args and b"--index" in args:
        return f"gateway worker {args[args.index(b'--index') + 1].decode()}"
    return ""


def listening_pids(port: int) -> list[int]:
    """Processes with a socket listening on ``port`` (IPv4 or IPv6)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    pids = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and any(_link(fd) in inodes for fd in _fds(entry)):
            pids.append(int(entry.name))
    return sorted(pids)


def _fds(process: Path) -> list[Path]:
    try:
        return list((process / "fd").iterdir())
    except OSError:  # gone, or not ours to read
        return []


def _link(fd: Path) -> str | None:
    """What a descriptor is; None for one closed since it was listed (a process's other
    descriptors still count: one that closed must not hide its listening socket)."""
    try:
        return os.readlink(fd)
    except OSError:
        return None


def server_roots(port: int) -> list[int]:
    """The server on ``port``: the processes listening there, where those are gateway
    workers their primary instead (whose descendants are the workers, Triton and its
    stubs)."""
    roots = set()
    for pid in listening_pids(port):
        stat = _stat(pid)
        roots.add(stat[1] if stat is not None and _part(pid) else pid)
    return sorted(roots)


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(name, parent pid, CPU seconds used) of a live process."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def process_tree(roots: list[int]) -> list[int]:
    """``roots`` and every descendant of them that is alive now."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[1], []).append(int(entry.name))
    found, pending = [], list(roots)
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.append(pid)
            pending.extend(children.get(pid, []))
    return sorted(found)


def _memory_kb(pid: int) -> tuple[int, str] | None:
    for path, label, kind in (("smaps_rollup", "Pss:", "pss"), ("status", "VmRSS:", "rss")):
        try:
            for line in (PROC / str(pid) / path).read_text().splitlines():
                if line.startswith(label):
                    return int(line.split()[1]), kind
        except (OSError, ValueError):
            continue
    return None


def sample(roots: list[int]) -> list[ProcessSample]:
    samples = []
    for pid in process_tree(roots):
        stat, memory = _stat(pid), _memory_kb(pid)
        if stat is not None and memory is not None:
            samples.append(ProcessSample(pid, stat[0], memory[0], stat[2], memory[1], _part(pid)))
    return samples


def cpu_by_role(before: list[ProcessSample], after: list[ProcessSample]) -> dict[str, float]:
    """CPU seconds each role used between two samples (a process born in between counts
    in full, one that died in between is lost)."""
    earlier = {s.pid: s.cpu_s for s in before}
    used: dict[str, float] = {}
    for s in after:
        used[s.role] = used.get(s.role, 0.0) + s.cpu_s - earlier.get(s.pid, 0.0)
    return used


def cpu_by_process(before: list[ProcessSample], after: list[ProcessSample]) -> dict[str, float]:
    """CPU seconds used between two samples by each kind of process (``label``): the
    gateway workers one by one, Triton, its stubs together."""
    earlier = {s.pid: s.cpu_s for s in before}
    used: dict[str, float] = {}
    for s in after:
        used[s.label] = used.get(s.label, 0.0) + s.cpu_s - earlier.get(s.pid, 0.0)
    return used


@dataclass
class MemoryWatch:
    """Samples the server's memory every ``interval_s`` while a run goes on and keeps the
    peak of the whole tree and of each role."""

    roots: list[int]
    interval_s: float = 0.5
    peak_kb: int = 0
    peak_by_role_kb: dict[str, int] = field(default_factory=dict)
    memory_kind: str = "pss"
    pids: set[int] = field(default_factory=set)
    _task: asyncio.Task | None = None

    def observe(self, samples: list[ProcessSample]) -> None:
        self.peak_kb = max(self.peak_kb, sum(s.memory_kb for s in samples))
        by_role: dict[str, int] = {}
        for s in samples:
            by_role[s.role] = by_role.get(s.role, 0) + s.memory_kb
            self.pids.add(s.pid)
            if s.memory_kind == "rss":
                self.memory_kind = "rss"
        for role, kb in by_role.items():
            self.peak_by_role_kb[role] = max(self.peak_by_role_kb.get(role, 0), kb)

    async def _run(self) -> None:
        while True:
            # Reading /proc takes a few milliseconds: off the loop that drives the clients.
            self.observe(await asyncio.to_thread(sample, self.roots))
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="memory-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.observe(await asyncio.to_thread(sample, self.roots))
