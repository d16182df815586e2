"""What the test processes of one run (pytest-xdist) share: a model every process's session
gateway converts the same way (one set of settings) is converted once, by the first process
that needs it; the others copy the published model into their own repository before their
first load of it, which then converts nothing.

Copies are hard links: a published model's files are never written again (a new conversion
publishes new files in their place).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def published_once(run_dir: Path | None, triton_name: str, repository: Path, convert: Callable[[], None]) -> None:
    """``triton_name`` published in ``repository``: copied from the run's copy where another
    process made it, else made by ``convert()`` (which publishes it there) and kept for the
    others. ``run_dir`` None: this process is the whole run."""
    if run_dir is None:
        convert()
        return
    kept = run_dir / "published" / triton_name
    kept.parent.mkdir(exist_ok=True)
    with _locked(run_dir / "published" / f"{triton_name}.lock"):
        if kept.is_dir():
            if not (repository / triton_name).exists():
                shutil.copytree(kept, repository / triton_name, copy_function=link_or_copy)
            return
        convert()
        partial = kept.with_name(f"{triton_name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(repository / triton_name, partial, copy_function=link_or_copy)
        partial.rename(kept)
