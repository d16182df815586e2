"""Conversions for the tests, forked from one warm converter per test process.

``python -m embedgate.converters`` spends most of a small model's conversion importing torch,
transformers and sentence-transformers (about 10 s of a loaded 2-core machine, against one
or two for the conversion itself). The gateway's warm converter (``converters/warm.py``)
imports them once and forks each conversion, which then runs exactly as the command does:
the same ``main()``, its spec on stdin, its progress on stderr, its result line on stdout,
its exit code. The tests use the same converter, so every conversion they make pays the
imports once per test process. The command itself is still run cold where its start is
what a test means (``tests/converters/test_main.py`` and the other files that run it with
fakes on the path).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from embedgate.api.children import tied_to_parent

READY_TIMEOUT_S = 600.0
# The warm converter ends when its control socket closes (this process ending), not idle.
IDLE_S = 24 * 3600


def _go(spec: bytes) -> bytes:
    """The request for a conversion of ``spec``, naming its model's library where the spec
    does, as the gateway's does (a spec that is none: the conversion reports it)."""
    try:
        library = json.loads(spec).get("library")
    except (ValueError, AttributeError):
        library = None
    return f"go {library}".encode() if library else b"go"


class ForkedConverter:
    def __init__(self, cwd: Path, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-m", "embedgate.converters.warm", str(theirs.fileno()), str(IDLE_S), "0"]
        self._proc = subprocess.Popen(
            tied_to_parent(command), stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), cwd=cwd, env=env
        )
        theirs.close()
        ours.settimeout(READY_TIMEOUT_S)
        if ours.recv(256) != b"ready":
            raise RuntimeError("the warm converter did not start")
        self._control = ours
        self._lock = threading.Lock()

    def run(self, spec: bytes, timeout: float) -> tuple[int, str, str]:
        """One conversion: its exit code, stdout and stderr (``subprocess.TimeoutExpired``
        past ``timeout``, the conversion killed)."""
        with self._lock, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            stdin_r, stdin_w = os.pipe()
            try:
                socket.send_fds(self._control, [_go(spec)], [stdin_r, out.fileno(), err.fileno()])
            finally:
                os.close(stdin_r)
            self._control.settimeout(60)
            kind, pid = self._control.recv(256).decode().split()
            assert kind == "pid", kind
            with os.fdopen(stdin_w, "wb") as stdin:
                stdin.write(spec)
            self._control.settimeout(timeout)
            try:
                kind, ended, code = self._control.recv(256).decode().split()
            except TimeoutError:
                os.kill(int(pid), signal.SIGKILL)
                self._control.settimeout(60)
                self._control.recv(256)  # its exit
                raise subprocess.TimeoutExpired(["embedgate.converters"], timeout) from None
            assert (kind, ended) == ("exit", pid), (kind, ended, pid)
            out.seek(0)
            err.seek(0)
            return int(code), out.read().decode(), err.read().decode()

    def close(self) -> None:
        self._control.close()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()


_converter: ForkedConverter | None = None
_started_with: tuple | None = None


def converter(cwd: Path, env: dict[str, str]) -> ForkedConverter:
    """This test process's warm converter, started at its first conversion, and started
    again for a conversion whose directory or environment differs (a forked conversion has
    the environment its warm converter was started with)."""
    global _converter, _started_with
    asked = (cwd, sorted((k, v) for k, v in env.items() if k != "PYTEST_CURRENT_TEST"))
    if _converter is not None and asked != _started_with:
        atexit.unregister(_converter.close)
        _converter.close()
        _converter = None
    if _converter is None:
        _converter = ForkedConverter(cwd, env)
        _started_with = asked
        atexit.register(_converter.close)
    return _converter
