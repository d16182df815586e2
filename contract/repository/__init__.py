"""The model repository: a local directory or an S3 bucket, behind one interface that the
converter (publishing) and the gateway (listing, reading, deleting) both use.

``open_repository(location, cache_dir)`` takes the ``EMBEDGATE_MODEL_REPOSITORY`` string
(Triton's own syntax, see :mod:`.location`). Importing this package imports neither
torch nor boto3; an S3 repository imports boto3 when it is opened.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from embedgate.contract.errors import RepositoryError
from embedgate.contract.repository.base import CONFIG_FILE, MANIFEST_FILE, ModelRepository, Stage
from embedgate.contract.repository.local import LocalRepository
from embedgate.contract.repository.location import (
    InvalidLocation,
    S3Location,
    is_s3,
    normalize,
    parse_s3,
    triton_location,
)

__all__ = [
    "CONFIG_FILE", "MANIFEST_FILE", "InvalidLocation", "LocalRepository", "ModelRepository",
    "RepositoryError", "S3Location", "Stage", "is_s3", "normalize", "open_repository",
    "parse_s3", "triton_location",
]


def open_repository(
    location: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None
) -> ModelRepository:
    """The repository at ``location``. ``cache_dir`` is where a remote repository keeps
    local copies (metadata, tokenizers, conversions' staging); default: the temp dir."""
    location = normalize(location)
    if is_s3(location):
        try:
            from embedgate.contract.repository.s3 import S3Repository
        except ImportError as error:  # boto3 and botocore: the s3 extra
            from embedgate.contract.repository.s3_client import INSTALL_HINT, S3SupportMissing

            raise S3SupportMissing(f"{location}: {INSTALL_HINT}") from error

        root = Path(cache_dir) if cache_dir else Path(tempfile.gettempdir()) / "embedgate-repository"
        return S3Repository(parse_s3(location), root)
    return LocalRepository(location)
