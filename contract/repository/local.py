"""A model repository in a local directory (the default), shared with Triton by path."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import uuid
from pathlib import Path

from embedgate.contract.repository.base import MANIFEST_FILE, ModelRepository
from embedgate.contract.repository.publish import STAGING_DIR, Staging
from embedgate.contract.spec import METADATA_FILE, ModelMetadata


class LocalRepository(ModelRepository):
    remote = False

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        self.location = str(self.root.resolve())

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def stage(self, name: str, *, replace: bool = False) -> Staging:
        return Staging(self.root, name, replace=replace)

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def metadata(self, name: str) -> ModelMetadata | None:
        try:
            return ModelMetadata.model_validate_json((self.root / name / METADATA_FILE).read_bytes())
        except (OSError, ValueError):
            return None

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(entry.name for entry in self.root.iterdir() if entry.is_dir() and not entry.name.startswith("."))

    def fetch(self, name: str, *, into: Path | None = None) -> Path:
        return self.root / name

    def delete(self, name: str) -> None:
        target = self.root / name
        if not target.exists():
            return
        # Moved aside first (atomic), so a half-deleted model is never visible.
        trash = self.root / STAGING_DIR / f"deleted-{name}-{uuid.uuid4().hex[:8]}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(target, trash)
        shutil.rmtree(trash, ignore_errors=True)
        _remove_if_empty(trash.parent)

    def remove_partial(self, name: str) -> None:
        staging = self.root / STAGING_DIR
        # Exactly this model's directories (<name>-<12 hex>), not those of "<name>-other".
        own = re.compile(rf"{re.escape(name)}-[0-9a-f]{{12}}")
        for leftover in staging.glob(f"{glob.escape(name)}-*"):
            if own.fullmatch(leftover.name):
                shutil.rmtree(leftover, ignore_errors=True)
        _remove_if_empty(staging)

    def read_manifest(self) -> list[str]:
        try:
            names = json.loads((self.root / MANIFEST_FILE).read_text())
        except (OSError, ValueError):
            return []
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    def write_manifest(self, names: list[str]) -> None:
        path = self.root / MANIFEST_FILE
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:6]}.tmp")
        self.root.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(names))
        os.replace(tmp, path)


def _remove_if_empty(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError:
        pass  # not empty: something else is staging there
