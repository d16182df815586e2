"""Stubs whose gateway is gone are ended; those of a live gateway are left alone."""

import subprocess
import sys
import time
from pathlib import Path

from embedgate.api.triton.orphans import STUB, reap_orphaned_stubs


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def fake_stub(shm_name: str) -> subprocess.Popen:
    """A process whose command line looks like a Python-backend stub's."""
    process = subprocess.Popen(
        ["bash", "-c", f'exec -a {STUB} {sys.executable} -c "import time; time.sleep(60)" model.py {shm_name} 1048576'],
    )
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{process.pid}/cmdline").read_bytes().startswith(STUB.encode()):
        assert time.monotonic() < deadline, "bash did not exec the fake stub"
        time.sleep(0.01)
    return process


def test_stubs_of_a_dead_gateway_are_ended_and_their_shared_memory_removed():
    gone = dead_pid()
    segment = Path(f"/dev/shm/embedgate_{gone}_abc123_segment")
    segment.write_bytes(b"x")
    orphan = fake_stub(f"embedgate_{gone}_abc123_region")
    owned = fake_stub("embedgate_1_abc123_region")  # pid 1 always runs
    try:
        assert reap_orphaned_stubs() >= 1  # orphans of gateways killed elsewhere count too
        assert orphan.wait(5) == -9
        assert owned.poll() is None
        assert not segment.exists()
    finally:
        for process in (orphan, owned):
            process.kill()
            process.wait()
        segment.unlink(missing_ok=True)
