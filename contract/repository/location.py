"""Where a model repository lives: a local directory or an S3 URL, in Triton's own syntax.

``--model-repository`` takes the same string, so the gateway, the converter and Triton
read one location:

- ``model_repository``, ``/srv/models``: a local directory;
- ``s3://host:port/bucket/path``: an S3-compatible service over plain HTTP (Triton's
  default for this form); ``s3://https://host:port/bucket/path`` for HTTPS;
- ``s3://bucket/path``: Amazon S3 itself, the region from the environment.

The S3 forms are checked against the pattern Triton matches them with, so a URL accepted
here is one Triton reads the same way (a URL it does not match, it would silently read
as an AWS bucket named ``host:port``). Credentials never appear in the URL: they come
from the standard AWS environment variables, and a URL carrying any is refused without
being echoed.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

S3_SCHEME = "s3://"
# Triton's S3 path pattern (core/src/filesystem/implementations/s3.h), split in parts.
_HOST = re.compile(r"[0-9a-zA-Z.\-]+")
_PORT = re.compile(r"[0-9]{1,5}")
_BUCKET = re.compile(r"[0-9a-z.\-]+")
_SEGMENT = re.compile(r"[0-9a-zA-Z.\-_]+")


class InvalidLocation(ValueError):
    """A repository location that cannot be used; the message never repeats the URL."""


@dataclass(frozen=True)
class S3Location:
    bucket: str
    # Key prefix of the repository inside the bucket, without slashes at either end ("" : the bucket's root).
    prefix: str
    # "http://host:port" or "https://host:port" for an S3-compatible service; None for AWS.
    endpoint_url: str | None

    @property
    def url(self) -> str:
        """The canonical URL, as Triton's --model-repository takes it."""
        path = "/".join(part for part in (self.bucket, self.prefix) if part)
        if self.endpoint_url is None:
            return f"{S3_SCHEME}{path}"
        scheme, host = self.endpoint_url.split("://", 1)
        # Plain HTTP is Triton's default for this form: written without a scheme.
        return f"{S3_SCHEME}{'https://' if scheme == 'https' else ''}{host}/{path}"

    def key(self, *parts: str) -> str:
        """The object key of ``parts`` (joined with '/') under the repository's prefix."""
        return "/".join(part for part in (self.prefix, *parts) if part)

    def cache_name(self) -> str:
        """A directory name for this repository's local cache (one per URL)."""
        return "s3-" + hashlib.sha256(self.url.encode()).hexdigest()[:16]


def is_s3(location: str | os.PathLike[str]) -> bool:
    return isinstance(location, str) and location.startswith(S3_SCHEME)


def parse_s3(url: str) -> S3Location:
    """Parse an ``s3://`` repository URL; raises :class:`InvalidLocation`."""
    if not url.startswith(S3_SCHEME):
        raise InvalidLocation("an S3 repository URL starts with s3://")
    rest = url[len(S3_SCHEME):]
    scheme = None
    for candidate in ("https", "http"):
        if rest.startswith(f"{candidate}://"):
            scheme, rest = candidate, rest[len(candidate) + 3:]
    if "@" in rest:
        raise InvalidLocation(
            "the S3 repository URL must not carry credentials; give them through "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if "?" in rest or "#" in rest:
        raise InvalidLocation("the S3 repository URL must not have a query or a fragment")
    parts = [part for part in rest.split("/") if part]
    if not parts:
        raise InvalidLocation("the S3 repository URL names no bucket")
    endpoint = None
    if ":" in parts[0]:
        host, _, port = parts[0].rpartition(":")
        if not _HOST.fullmatch(host) or not _PORT.fullmatch(port) or not 0 < int(port) < 65536:
            raise InvalidLocation("the S3 endpoint must be host:port (letters, digits, '.', '-'; a port number)")
        endpoint = f"{scheme or 'http'}://{host}:{int(port)}"
        parts = parts[1:]
        if not parts:
            raise InvalidLocation("the S3 repository URL names no bucket after host:port")
    elif scheme is not None:
        raise InvalidLocation("an S3 endpoint given with http:// or https:// needs a port (s3://https://host:port/bucket)")
    bucket, path = parts[0], parts[1:]
    if not _BUCKET.fullmatch(bucket):
        raise InvalidLocation("the S3 bucket name may hold only lower-case letters, digits, '.' and '-'")
    if not all(_SEGMENT.fullmatch(segment) for segment in path):
        raise InvalidLocation("the S3 repository path may hold only letters, digits, '.', '-' and '_'")
    return S3Location(bucket=bucket, prefix="/".join(path), endpoint_url=endpoint)


def normalize(location: str | os.PathLike[str]) -> str:
    """The setting's canonical string: an S3 URL as Triton reads it, or a local path as given."""
    if isinstance(location, os.PathLike):
        return os.fspath(location)
    if not isinstance(location, str) or not location:
        raise InvalidLocation("the model repository must be a directory or an s3:// URL")
    if "://" in location and not is_s3(location):
        raise InvalidLocation("the model repository must be a directory or an s3:// URL (no other scheme)")
    return parse_s3(location).url if is_s3(location) else location


def triton_location(location: str | os.PathLike[str]) -> str:
    """What tritonserver's --model-repository gets: the URL, or the directory's absolute path."""
    location = normalize(location)
    return location if is_s3(location) else str(Path(location).resolve())
