"""Staging a model for an S3 repository: written and checked in a local directory (the
repository's cache), then published by uploading it, config last."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from converters.errors import TargetExistsError
from converters.publish import STAGING_DIR
from converters.spec import METADATA_FILE

from .base import CONFIG_FILE

if TYPE_CHECKING:
    from .s3 import S3Repository


class S3Staging:
    """A model staged in the repository's local cache and published by uploading it."""

    def __init__(self, repository: S3Repository, name: str, *, replace: bool = False):
        if not name or name.startswith(".") or "/" in name:
            raise ValueError(f"invalid model directory name: {name!r}")
        self.repository = repository
        self.name = name
        self.replace = replace
        self.target = repository.describe(name)
        self._root = repository.cache_dir / STAGING_DIR
        self._path: Path | None = None
        self.published = False

    @property
    def path(self) -> Path:
        if self._path is None:
            raise RuntimeError("staging directory exists only inside the with-block")
        return self._path

    def __enter__(self) -> S3Staging:
        # Refuse before any expensive work; publish() checks again.
        if not self.replace and self.repository.exists(self.name):
            raise TargetExistsError(exists_message(self.target))
        self._root.mkdir(parents=True, exist_ok=True)
        self._path = self._root / f"{self.name}-{secrets.token_hex(6)}"
        self._path.mkdir()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
        try:
            self._root.rmdir()
        except OSError:
            pass  # not empty: another conversion is staging beside us

    def publish(self) -> str:
        self.repository.publish(self.path, self.name, replace=self.replace)
        self.published = True
        return self.target


def upload_order(staged: Path) -> list[str]:
    """The staged files, relative, with metadata.json and then config.pbtxt last."""
    files = sorted(
        path.relative_to(staged).as_posix()
        for path in staged.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )
    last = [name for name in (METADATA_FILE, CONFIG_FILE) if name in files]
    return [name for name in files if name not in last] + last


def exists_message(target: str) -> str:
    return f"model {target} already exists in the repository (set replace to overwrite it)"
