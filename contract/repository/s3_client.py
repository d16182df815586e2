"""The S3 client the repository uses, and what Triton needs to read the same bucket.

Credentials are boto3's usual sources (the AWS_* environment variables first); nothing
here reads, passes or logs them. boto3 is the ``s3`` extra (``pip install
"embedgate[s3]"``): imported only when an S3 location is used, so a local repository
never needs it.
"""

from __future__ import annotations

import os

from embedgate.contract.errors import RepositoryError
from embedgate.contract.repository.location import S3Location, is_s3

INSTALL_HINT = 'an S3 location needs boto3: pip install "embedgate[s3]"'

# What S3-compatible services other than AWS expect when nobody says (Triton's default too).
DEFAULT_REGION = "us-east-1"


def region() -> str | None:
    """The region from the environment, as AWS's SDKs read it (AWS_REGION first)."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


def triton_environment(location: S3Location) -> dict[str, str]:
    """Variables tritonserver needs besides the inherited AWS_* credentials. Triton reads
    the region only from AWS_DEFAULT_REGION; without one, its SDK asks the EC2 instance
    metadata service (169.254.169.254) for it, which an S3-compatible service never needs."""
    chosen = region() or (DEFAULT_REGION if location.endpoint_url else None)
    return {"AWS_DEFAULT_REGION": chosen} if chosen else {}


class S3SupportMissing(RepositoryError):
    """An S3 location without boto3 installed."""


def check_supported(location: str) -> str:
    """``location`` itself, unless it is an S3 one and boto3 is not installed."""
    if is_s3(location):
        try:
            import boto3  # noqa: F401
        except ImportError:
            raise ValueError(INSTALL_HINT) from None
    return location


def make_client(location: S3Location):
    try:
        import boto3
        from botocore.config import Config
    except ImportError as error:
        raise S3SupportMissing(f"{location.url}: {INSTALL_HINT}") from error
    return boto3.client(
        "s3",
        endpoint_url=location.endpoint_url,
        region_name=region() or (DEFAULT_REGION if location.endpoint_url else None),
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
        ),
    )
