"""Staging a model for an S3 repository: written and checked in a local directory (the
repository's cache), then published by uploading it, config last."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from embedgate.contract.errors import TargetExistsError
from embedgate.contract.repository.base import CONFIG_FILE
from embedgate.contract.repository.publish import STAGING_DIR, StagedModel
from embedgate.contract.spec import METADATA_FILE

if TYPE_CHECKING:
    from embedgate.contract.repository.s3 import S3Repository


class S3Staging(StagedModel):
    """A model staged in the repository's local cache and published by uploading it."""

    def __init__(self, repository: S3Repository, name: str, *, replace: bool = False):
        super().__init__(repository.cache_dir / STAGING_DIR, name, replace=replace)
        self.repository = repository
        self.target = repository.describe(name)

    def _check_target(self) -> None:
        if not self.replace and self.repository.exists(self.name):
            raise TargetExistsError(exists_message(self.target))

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
