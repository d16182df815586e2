"""Python-backend stubs that outlived their gateway.

A gateway killed outright (SIGKILL, the OOM killer, a Ray replica stopped hard) takes
its tritonserver with it (parent-death signal), but the Python backend's stubs, one per
model instance, stay: each holds an onnxruntime session and shared memory. Every
Triton a gateway starts names its shared memory ``embedgate_<gateway pid>_...``, and a
stub's command line carries that name, so a starting gateway can tell stubs whose
gateway is gone and end them. A Triton reading an S3 repository also leaves behind the
models it downloaded, in directories named the same way.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import signal
import tempfile

log = logging.getLogger("embedgate.triton")
STUB = "triton_python_backend_stub"
_OWNER = re.compile(r"^(embedgate_(\d+)_)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stubs() -> list[tuple[int, str, int]]:
    """(stub pid, shared-memory family, owning gateway pid) of every embedgate stub."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].decode(errors="replace").endswith(STUB):
            continue
        for arg in argv[1:]:
            match = _OWNER.match(arg.decode(errors="replace"))
            if match:
                found.append((int(entry), match.group(1), int(match.group(2))))
                break
    return found


def reap_orphaned_stubs() -> int:
    """End the stubs of gateways that no longer run and remove their shared memory."""
    reaped = 0
    for pid, family, owner in _stubs():
        if _alive(owner):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            reaped += 1
        except ProcessLookupError:
            pass
        for segment in glob.glob(f"/dev/shm/{glob.escape(family)}*"):
            try:
                os.unlink(segment)
            except OSError:
                pass
    if reaped:
        log.warning("ended %d Python-backend stub(s) left behind by a gateway that was killed", reaped)
    return reaped


def remove_orphaned_downloads() -> None:
    """An S3 repository's download directories (``embedgate_<gateway pid>_..._s3-*`` in the
    temp directory, a model's weights each) of gateways that no longer run."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "embedgate_*_s3-*")):
        match = _OWNER.match(os.path.basename(path))
        if match and not _alive(int(match.group(2))):
            shutil.rmtree(path, ignore_errors=True)
