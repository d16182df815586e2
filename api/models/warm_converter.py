"""Conversion processes, started cold or forked warm.

A conversion runs in a process of its own (torch never enters the gateway; a crash, a hang
or an out-of-memory kill costs only that process). Started cold, as ``python -m
embedgate.converters``, each one first spends seconds importing its libraries: most of a
small model's conversion on a 2-core machine. So the gateway keeps a warm converter
(``converters/warm.py``) that has imported them once and forks each conversion, while
conversions come: it ends ``EMBEDGATE_CONVERTER_WARM_S`` after the last one. A conversion
looks the same either way (``ConverterProcess``: its stdin, stdout, stderr, exit code).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys

from ..children import tied_to_parent

log = logging.getLogger("embedgate.conversion")
# The warm converter's first answer comes once it has imported its libraries.
READY_TIMEOUT_S = 300.0


class ConverterProcess:
    """What ``run_conversion`` needs of a conversion's process, cold or warm."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader, stdin_fd: int):
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self._stdin_fd = stdin_fd
        self.returncode: int | None = None
        self._exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def send(self, data: bytes) -> None:
        """The spec on its stdin, then end of file (a spec fits a pipe's buffer)."""
        try:
            await asyncio.to_thread(os.write, self._stdin_fd, data)
        finally:
            os.close(self._stdin_fd)

    def exited(self, code: int) -> None:
        self.returncode = code
        if not self._exited.done():
            self._exited.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def _reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0))
    return reader


class WarmConverter:
    """The warm converter of this gateway process, started at the first conversion."""

    def __init__(self, idle_s: float, allow_network: bool):
        self.idle_s = idle_s
        self.allow_network = allow_network
        self._control: socket.socket | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._listener: asyncio.Task | None = None
        self._running: dict[int, ConverterProcess] = {}
        self._pids: asyncio.Queue[int] = asyncio.Queue()
        self._lock = asyncio.Lock()

    async def spawn(self, library: str) -> ConverterProcess:
        """A conversion of a model of ``library`` forked by the warm converter (started, or
        started again, as needed)."""
        async with self._lock:
            if self._control is None:
                await self._start()
            assert self._control is not None
            stdin_r, stdin_w = os.pipe()
            stdout_r, stdout_w = os.pipe()
            stderr_r, stderr_w = os.pipe()
            try:
                socket.send_fds(self._control, [f"go {library}".encode()], [stdin_r, stdout_w, stderr_w])
            finally:
                for fd in (stdin_r, stdout_w, stderr_w):
                    os.close(fd)
            pid = await self._pids.get()
            if pid < 0:
                self._forget()
                raise ConnectionError("the warm converter went away")
            process = ConverterProcess(pid, await _reader(stdout_r), await _reader(stderr_r), stdin_w)
            self._running[pid] = process
            return process

    async def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [
            sys.executable, "-m", "embedgate.converters.warm",
            str(theirs.fileno()), str(self.idle_s), "1" if self.allow_network else "0",
        ]
        self._proc = await asyncio.create_subprocess_exec(
            *tied_to_parent(command), stdin=asyncio.subprocess.DEVNULL, pass_fds=(theirs.fileno(),)
        )
        theirs.close()
        ours.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            ready = await asyncio.wait_for(loop.sock_recv(ours, 256), READY_TIMEOUT_S)
        except BaseException:
            ours.close()
            self._proc.kill()
            raise
        if ready != b"ready":
            ours.close()
            raise ConnectionError("the warm converter did not start")
        self._control = ours
        self._pids = asyncio.Queue()
        self._listener = asyncio.create_task(self._listen(ours), name="warm-converter")
        log.info("warm converter started (pid %d)", self._proc.pid)

    async def _listen(self, control: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            while message := await loop.sock_recv(control, 256):
                kind, *fields = message.decode().split()
                if kind == "pid":
                    self._pids.put_nowait(int(fields[0]))
                elif kind == "exit":
                    process = self._running.pop(int(fields[0]), None)
                    if process is not None:
                        process.exited(int(fields[1]))
        except OSError:
            pass
        # Gone (idle, or died): conversions it held end as killed; the next starts another.
        if self._control is control:
            self._forget()

    def _forget(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        self._pids.put_nowait(-1)
        for process in self._running.values():
            process.exited(-signal.SIGKILL)
        self._running.clear()
