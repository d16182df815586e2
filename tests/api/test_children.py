"""A child started through ``tied_to_parent``: the command itself (same pid), its memory
capped, and killed when its parent dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from embedgate.api.children import tied_to_parent


def test_the_child_is_the_command_with_its_memory_capped():
    probe = "import os, resource; print(os.getpid(), resource.getrlimit(resource.RLIMIT_AS)[0])"
    child = subprocess.Popen(
        tied_to_parent([sys.executable, "-c", probe], memory_limit_mb=4096), stdout=subprocess.PIPE, text=True
    )
    pid, limit = child.communicate(timeout=60)[0].split()
    assert child.returncode == 0
    assert int(pid) == child.pid  # the command replaced the tie: signals reach it
    assert int(limit) == 4096 * 1024 * 1024


def test_without_a_cap_the_limit_is_inherited():
    probe = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    child = subprocess.run(tied_to_parent([sys.executable, "-c", probe]), capture_output=True, text=True, check=True)
    assert int(child.stdout) == resource_limit()


def resource_limit() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_AS)[0]


def test_the_child_dies_with_its_parent(tmp_path):
    # A parent that starts a tied child (which would sleep a minute), reports its pid, then waits.
    pid_file = tmp_path / "child.pid"
    parent_code = (
        "import subprocess, sys, time\n"
        "from embedgate.api.children import tied_to_parent\n"
        "child = subprocess.Popen(tied_to_parent(['/bin/sleep', '60']))\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text(), 30, "the child's pid")
        child = int(pid_file.read_text())
        wait_until(lambda: _comm(child) == "sleep", 30, "the child to become the command")
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_until(lambda: _comm(child) in (None, ""), 30, "the child to die with its parent")
    finally:
        parent.kill()


def _comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            return ""  # dead, waiting to be reaped
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except FileNotFoundError:
        return None


def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
