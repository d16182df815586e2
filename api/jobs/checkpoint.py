"""Where the jobs' state survives the machine that keeps it.

The store is SQLite on the coordinator's machine. Beside a local repository that is where
the jobs' files are too, and whatever loses the one loses the other. With an S3 repository
the files live in the bucket and the store would be the one thing lost with its machine
(a Ray node, a pod): every file and batch forgotten, every job's progress with them. So
there the coordinator copies the store into the bucket after each change a client made or a
chunk recorded (``state/jobs.sqlite3`` beside the files; a consistent snapshot by SQLite's
backup), and a coordinator that starts with no store of its own takes that copy. Leases are
not copied for their own sake: a lease the copy lacks or holds past its end is leased again
when it runs out, and a chunk run twice writes the same output under the same name.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from embedgate.contract.repository.location import is_s3

from .coordinator import Coordinator
from .files import JobFiles, open_files
from .store import JobStore

log = logging.getLogger("embedgate.jobs")
STORE_FILE = "jobs.sqlite3"
CHECKPOINT = "state/jobs.sqlite3"


def open_coordinator(repository: str, state_dir: Path, *, lease_s: float) -> Coordinator:
    """The coordinator of ``repository``'s jobs, its store in ``state_dir`` (restored from
    the bucket's copy where it has none, for an S3 repository)."""
    files = open_files(repository, state_dir)
    path = state_dir / STORE_FILE
    remote = is_s3(repository)
    if remote and not path.exists():
        restore(files, path)
    coordinator = Coordinator(JobStore(path), files, lease_s=lease_s)
    if remote:
        coordinator.on_change = lambda: save(coordinator.store, files)
    return coordinator


def restore(files: JobFiles, path: Path) -> bool:
    """The bucket's copy of the store as ``path``; False where there is none."""
    if files.size(CHECKPOINT) is None:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".restoring-")
    with os.fdopen(handle, "wb") as out:
        for block in files.stream(CHECKPOINT):
            out.write(block)
    os.replace(temporary, path)
    log.warning("bulk jobs: no store on this machine; restored the copy kept with the jobs' files")
    return True


def save(store: JobStore, files: JobFiles) -> None:
    with tempfile.TemporaryDirectory(prefix="embedgate-jobs-") as scratch:
        snapshot = Path(scratch) / STORE_FILE
        store.backup(snapshot)
        files.put(CHECKPOINT, snapshot)
