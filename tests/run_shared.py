"""What the test processes of one run (pytest-xdist) share: a model converted the same way
(one spec) by several of them is converted once, by the first process that needs it; the
others copy the published model into their own repository (a gateway's next load of it
converts nothing). MiniLM is converted so by every process's session gateway, and its
variants by the session gateway and the converter tests alike.

Copies are hard links: a published model's files are never written again (a new conversion
publishes new files in their place). What serving a model adds to its directory (the
Python backend's ``__pycache__``) is not copied.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

SERVED = shutil.ignore_patterns("__pycache__")


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
                shutil.copytree(kept, repository / triton_name, copy_function=link_or_copy, ignore=SERVED)
            return
        convert()
        partial = kept.with_name(f"{triton_name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(repository / triton_name, partial, copy_function=link_or_copy, ignore=SERVED)
        partial.rename(kept)
