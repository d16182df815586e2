"""A download's progress, told as the conversion's progress lines: the files and bytes done
of those the snapshot needs, at the start, as each file ends and at most every
``INTERVAL_S`` in between (a large file's bytes as they come).

Each line carries its numbers as data beside its words (``converters/__main__.py``'s
``Progress``), which the gateway hands to a load's listeners as the event's ``download``
(``api/models/progress.py``)::

    downloading org/name: 2 of 7 files, 1.2 of 90.1 MB
    {"download": {"repo": "org/name", "revision": "<commit>", "files_done": 2, "files_total": 7,
                  "bytes_done": 1200000, "bytes_total": 90100000}}

huggingface_hub reports a file's bytes to a progress-bar class it is given (tqdm's
interface: made with the file's ``total`` and the bytes already there, ``initial``, where a
download resumes; ``update(n)`` as bytes arrive): ``bar`` is one, counting into this.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

Report = Callable[..., None]
INTERVAL_S = 0.5


def size_text(count: float) -> str:
    """Bytes for people: 950 B, 12.3 kB, 1.2 MB, 3.4 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{int(count)} B"


class DownloadProgress:
    """The progress of downloading ``sizes`` (file -> bytes) of ``repo_id`` at ``commit``."""

    def __init__(self, report: Report, repo_id: str, commit: str, sizes: Mapping[str, int],
                 clock: Callable[[], float] = time.monotonic):
        self.report = report
        self.repo_id, self.commit = repo_id, commit
        self.sizes = dict(sizes)
        self.files_done = 0
        self.finished_bytes = 0  # of the files done
        self.current_bytes = 0  # of the file under way
        self.clock = clock
        self.told_at = float("-inf")

    @property
    def bytes_total(self) -> int:
        return sum(self.sizes.values())

    @property
    def bytes_done(self) -> int:
        return self.finished_bytes + self.current_bytes

    def begin(self) -> None:
        self._tell()

    def file_started(self, initial: int = 0) -> None:
        """A file's download begins, ``initial`` bytes of it already there (a resumed one)."""
        self.current_bytes = int(initial or 0)
        self._tell_in_time()

    def add(self, count: float) -> None:
        # A download that restarts from its beginning takes back what it counted (negative).
        self.current_bytes = max(0, self.current_bytes + int(count or 0))
        self._tell_in_time()

    def file_done(self, path: str) -> None:
        self.files_done += 1
        self.finished_bytes += self.sizes.get(path, 0)
        self.current_bytes = 0
        self._tell()

    def numbers(self) -> dict[str, Any]:
        return {
            "repo": self.repo_id, "revision": self.commit,
            "files_done": self.files_done, "files_total": len(self.sizes),
            "bytes_done": min(self.bytes_done, self.bytes_total) if self.bytes_total else self.bytes_done,
            "bytes_total": self.bytes_total,
        }

    def _tell_in_time(self) -> None:
        if self.clock() - self.told_at >= INTERVAL_S:
            self._tell()

    def _tell(self) -> None:
        self.told_at = self.clock()
        numbers = self.numbers()
        verb = "downloaded" if numbers["files_done"] == numbers["files_total"] else "downloading"
        self.report(
            f"{verb} {self.repo_id}: {numbers['files_done']} of {numbers['files_total']} files, "
            f"{size_text(numbers['bytes_done'])} of {size_text(numbers['bytes_total'])}",
            {"download": numbers},
        )

    def bar(self) -> type:
        """A progress-bar class for huggingface_hub's downloads, counting into this."""
        progress = self

        class FileBar:
            def __init__(self, *args: Any, total: int | None = None, initial: int = 0, **kwargs: Any):
                progress.file_started(initial)

            def __enter__(self) -> FileBar:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def update(self, n: float | None = 1) -> None:
                progress.add(n or 0)

            def close(self) -> None:
                pass

            def refresh(self, *args: Any, **kwargs: Any) -> None:
                pass

            def set_description(self, *args: Any, **kwargs: Any) -> None:
                pass

            def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
                pass

        return FileBar
