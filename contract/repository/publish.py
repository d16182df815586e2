"""Atomic publish of a model directory into a Triton model repository.

Everything is written under ``<repository>/.staging/<name>-<random>/`` (same filesystem,
so the final ``os.rename`` is atomic) and renamed to ``<repository>/<name>`` only when
complete: Triton, or a gateway listing the repository, never sees a half-written model.
The staging directory is removed on any failure, including a cancelled conversion.
"""

from __future__ import annotations

import os
import secrets
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Self

from embedgate.contract.errors import TargetExistsError

# A dot directory: the gateway's repository listing must skip names starting with ".".
STAGING_DIR = ".staging"


class StagedModel(ABC):
    """``with Stage(...) as stage:`` write into ``stage.path``, then ``stage.publish()``.

    The model is written into a private directory under ``staging_root``; leaving the
    block without publishing (an exception, or simply not calling publish) removes
    everything that was staged. Subclasses say where the model goes and how it gets there.
    """

    def __init__(self, staging_root: Path, name: str, *, replace: bool):
        if not name or name.startswith(".") or "/" in name or name != os.path.basename(name):
            raise ValueError(f"invalid model directory name: {name!r}")
        self.name = name
        self.replace = replace
        self._staging_root = staging_root
        self._path: Path | None = None
        self.published = False

    @property
    def path(self) -> Path:
        if self._path is None:
            raise RuntimeError("staging directory exists only inside the with-block")
        return self._path

    def __enter__(self) -> Self:
        # Refuse before any expensive work; publish() checks again.
        self._check_target()
        self._staging_root.mkdir(parents=True, exist_ok=True)
        self._path = self._staging_root / f"{self.name}-{secrets.token_hex(6)}"
        self._path.mkdir()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._path is not None:
            # Gone already when a local publish renamed it into place.
            shutil.rmtree(self._path, ignore_errors=True)
        try:
            self._staging_root.rmdir()
        except OSError:
            pass  # not empty: another conversion is staging beside us

    @abstractmethod
    def _check_target(self) -> None:
        """Raise TargetExistsError when the model exists and may not be replaced."""

    @abstractmethod
    def publish(self) -> Path | str:
        """Make the staged model the published one; where it now is."""


class Staging(StagedModel):
    """A model published into a local repository by one atomic rename."""

    def __init__(self, repository: str | os.PathLike[str], name: str, *, replace: bool = False):
        self.repository = Path(repository)
        super().__init__(self.repository / STAGING_DIR, name, replace=replace)
        self.target = self.repository / name

    def publish(self) -> Path:
        """Move the staged directory to ``<repository>/<name>``; returns that path."""
        staged = self.path
        _fsync_tree(staged)
        self._check_target()
        old: Path | None = None
        if self.replace and self.target.exists():
            old = self._staging_root / f"{self.name}-old-{secrets.token_hex(6)}"
            os.rename(self.target, old)
        try:
            os.rename(staged, self.target)
        except OSError as error:
            if old is not None:
                os.rename(old, self.target)
                raise
            if self.target.exists():
                # Another conversion published the same name since our check.
                raise TargetExistsError(_exists_message(self.target)) from error
            raise
        self.published = True
        _fsync_dir(self.repository)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.target

    def _check_target(self) -> None:
        if self.target.exists() and not self.replace:
            raise TargetExistsError(_exists_message(self.target))


def _exists_message(target: Path) -> str:
    return f"model directory {target} already exists (set replace to overwrite it)"


def _fsync_tree(root: Path) -> None:
    # Without this a crash just after the rename could publish a directory of empty files.
    for directory, _, files in os.walk(root):
        for file_name in files:
            fd = os.open(os.path.join(directory, file_name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(directory))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
