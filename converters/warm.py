"""``python -m embedgate.converters.warm FD IDLE_S ALLOW_NETWORK``: a converter that has imported its
libraries once (torch, sentence-transformers, transformers, onnx, onnxruntime: seconds of
every conversion on a small machine) and forks each conversion from there. open_clip
(more than a second more) is imported at the first conversion that needs it.

Each conversion still runs in a process of its own, exactly as ``python -m
embedgate.converters`` runs it: the same ``main()``, its spec on stdin, its progress on
stderr, its result line on stdout, its exit code, dying with its parent. A conversion with
a memory cap does not come here: a forked process already holds the imported libraries'
address space, so the cap would mean something else (the gateway starts those cold).
The gateway talks to this process over the Unix socket FD (SOCK_SEQPACKET, one message at
a time):

- ``go [LIBRARY]`` with three file descriptors (the conversion's stdin, stdout and stderr)
  forks a conversion of a model of LIBRARY (the spec's ``library``); the answer is
  ``pid <pid>``;
- ``exit <pid> <code>`` reports a conversion that ended (a negative code: its signal).

Forking after the imports is safe because nothing has run: no thread pool exists yet, and
each conversion builds its own. The process ends when the gateway closes the socket (or
dies: its parent-death signal), or after ``IDLE_S`` seconds with no conversion.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import select
import signal
import socket
import sys
import time

from embedgate.converters import hub_access

PR_SET_PDEATHSIG = 1
POLL_S = 0.2


# What every conversion imports, before the first one.
PRELOADED = ("onnx", "onnxruntime", "sentence_transformers", "torch", "embedgate.converters.__main__")
# What a conversion of a model of one library imports besides, at the first of them (most
# gateways never convert a CLIP model); each conversion forked after it shares it.
ON_DEMAND = {"open_clip": ("open_clip",)}


def _preload() -> None:
    for module in PRELOADED:
        importlib.import_module(module)


def _import_for(message: bytes) -> None:
    """The libraries the conversion that ``message`` asks for needs beyond the preloaded ones
    (one missing is the conversion's own error to report)."""
    for library in message.decode().split()[1:]:
        for module in ON_DEMAND.get(library, ()):
            try:
                importlib.import_module(module)
            except ImportError:
                pass


def _convert(fds: list[int]) -> None:
    """In the forked child: become one conversion, as ``python -m embedgate.converters``."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    from embedgate.converters.__main__ import main

    code = 1
    try:
        code = main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(control: socket.socket, idle_s: float) -> None:
    running: set[int] = set()
    idle_since = time.monotonic()
    while True:
        ready, _, _ = select.select([control], [], [], POLL_S)
        if ready:
            message, fds, _, _ = socket.recv_fds(control, 256, 3)
            if not message:
                return  # the gateway is gone
            _import_for(message)
            pid = os.fork()
            if pid == 0:
                control.close()
                _convert(fds)
            for fd in fds:
                os.close(fd)
            running.add(pid)
            control.send(f"pid {pid}".encode())
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            running.discard(pid)
            control.send(f"exit {pid} {os.waitstatus_to_exitcode(status)}".encode())
        if running:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > idle_s:
            return


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[0]))
    # Before the imports, which read it once: every conversion forked here shares it.
    hub_access.configure(argv[2] == "1")
    _preload()
    control.send(b"ready")
    try:
        serve(control, float(argv[1]))
    except (BrokenPipeError, ConnectionError):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
