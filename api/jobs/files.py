"""Where the bytes of bulk jobs live: uploaded files, each chunk's output lines, and the
joined output and error files. A directory beside a local model repository, or a prefix of
the bucket of an S3 one (so every gateway of the bucket reads the same files).

Every write is whole or absent: a file in a directory is written aside and renamed into
place; an S3 object appears whole when its upload ends. Calls block (the gateway makes them
off the event loop).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from embedgate.contract.repository.location import S3Location, is_s3, parse_s3
from embedgate.contract.repository.s3_client import make_client

JOBS_DIR = ".embedgate-jobs"
READ_BLOCK = 1 << 20


class JobFiles(Protocol):
    def put(self, name: str, source: Path) -> None:
        """Store the file ``source`` as ``name`` (whole or not at all)."""

    def local(self, name: str) -> Path:
        """A local file holding ``name``'s bytes (a copy cached on first use for S3)."""

    def stream(self, name: str) -> Iterator[bytes]: ...

    def size(self, name: str) -> int | None: ...

    def delete(self, names: list[str]) -> None: ...


class LocalFiles:
    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, name: str) -> Path:
        return self.root / name

    def put(self, name: str, source: Path) -> None:
        target = self._path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".writing-")
        os.close(handle)
        try:
            shutil.copyfile(source, temporary)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def local(self, name: str) -> Path:
        path = self._path(name)
        if not path.is_file():
            raise FileNotFoundError(name)
        return path

    def stream(self, name: str) -> Iterator[bytes]:
        with self.local(name).open("rb") as handle:
            while block := handle.read(READ_BLOCK):
                yield block

    def size(self, name: str) -> int | None:
        path = self._path(name)
        return path.stat().st_size if path.is_file() else None

    def delete(self, names: list[str]) -> None:
        for name in names:
            self._path(name).unlink(missing_ok=True)


class S3Files:
    """Objects under ``<repository prefix>/.embedgate-jobs/``; reads cached in ``cache``."""

    def __init__(self, location: S3Location, cache: Path, client=None):
        self.location = location
        self.cache = cache
        self.client = client or make_client(location)

    def _key(self, name: str) -> str:
        return self.location.key(JOBS_DIR, name)

    def put(self, name: str, source: Path) -> None:
        self.client.upload_file(str(source), self.location.bucket, self._key(name))

    def local(self, name: str) -> Path:
        # Uploaded files never change once stored: a cached copy stays right.
        path = self.cache / name
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".fetching-")
            os.close(handle)
            try:
                self.client.download_file(self.location.bucket, self._key(name), temporary)
                os.replace(temporary, path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        return path

    def stream(self, name: str) -> Iterator[bytes]:
        body = self.client.get_object(Bucket=self.location.bucket, Key=self._key(name))["Body"]
        try:
            while block := body.read(READ_BLOCK):
                yield block
        finally:
            body.close()

    def size(self, name: str) -> int | None:
        try:
            return int(self.client.head_object(Bucket=self.location.bucket, Key=self._key(name))["ContentLength"])
        except self.client.exceptions.ClientError:
            return None

    def delete(self, names: list[str]) -> None:
        for start in range(0, len(names), 1000):
            keys = [{"Key": self._key(name)} for name in names[start : start + 1000]]
            if keys:
                self.client.delete_objects(Bucket=self.location.bucket, Delete={"Objects": keys, "Quiet": True})
        for name in names:
            (self.cache / name).unlink(missing_ok=True)


def open_files(repository: str, state_dir: Path) -> JobFiles:
    """The job files of ``repository``: beside the jobs' state (``state_dir``) for a local
    one, under its bucket's prefix for S3 (``state_dir`` then caches what is read)."""
    if is_s3(repository):
        return S3Files(parse_s3(repository), state_dir / "files-cache")
    return LocalFiles(state_dir / "files")
