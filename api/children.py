"""Child processes (tritonserver, the converter) that die with the gateway.

Started through a tiny Python that ties the child to this process before it becomes the
command (``PR_SET_PDEATHSIG``, kept across ``exec``), checks that its parent did not die
first, caps its memory where asked, and ``exec``s the command: the pid stays the same.
Not a ``preexec_fn``: that runs Python in the forked copy of a process whose
other threads (gRPC's among them) may hold locks at the fork; that child can die before
it ever runs the command.
"""

from __future__ import annotations

import os
import sys

_TIE = """\
import ctypes, os, resource, signal, sys
ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    os._exit(70)  # the parent is already gone
limit = int(sys.argv[2]) * 1024 * 1024
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
os.execv(sys.argv[3], sys.argv[3:])
"""


def tied_to_parent(command: list[str], *, memory_limit_mb: int = 0) -> list[str]:
    """``command`` (its first item a path) run so that it is killed when this process
    dies, with at most ``memory_limit_mb`` of address space (0: no cap)."""
    return [sys.executable, "-I", "-S", "-c", _TIE, str(os.getpid()), str(memory_limit_mb), *command]
