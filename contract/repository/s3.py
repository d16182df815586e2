"""A model repository in an S3 bucket (Amazon S3 or any S3-compatible service).

S3 has no rename, so a model cannot appear atomically. What makes a model loadable is its
``config.pbtxt`` (Triton reads the config first), so it is uploaded last, after
``metadata.json`` (what makes the gateway list it), and removed first on delete: a model
that is half uploaded or half deleted is never loaded. The config is written with
``If-None-Match: *``, so of two conversions publishing one name at once exactly one wins.
A model the gateway computes whole (static embeddings) has no config: its
``metadata.json``, last, is what completes it, written so. A publish that fails removes
what it uploaded.

A model is staged in a local directory (the repository's cache), checked there, then
uploaded. The gateway keeps its copies of metadata and tokenizers in the same cache; the
weights are only ever downloaded by Triton itself, but for a static embedding model's
vectors, which the gateway computes with.

Credentials come from boto3's usual sources (the AWS_* environment variables first),
never from the URL (:mod:`.s3_client`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from embedgate.contract.errors import RepositoryError, TargetExistsError
from embedgate.contract.repository.base import CONFIG_FILE, MANIFEST_FILE, ModelRepository
from embedgate.contract.repository.location import S3Location
from embedgate.contract.repository.publish import STAGING_DIR
from embedgate.contract.repository.s3_client import make_client
from embedgate.contract.repository.s3_staging import S3Staging, exists_message, upload_order
from embedgate.contract.spec import METADATA_FILE, ROUTES_DIR, STATIC_WEIGHTS_FILE, TOKENIZER_DIR, ModelMetadata

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_DELETE_BATCH = 1000  # DeleteObjects' limit


class S3Repository(ModelRepository):
    remote = True

    def __init__(self, location: S3Location, cache_root: str | os.PathLike[str], client=None):
        self.s3 = location
        self.location = location.url
        # This repository's local cache: fetched metadata and tokenizers, conversions' staging.
        self.cache_dir = Path(cache_root) / location.cache_name()
        self._client = client or make_client(location)

    def create(self) -> None:
        # S3 has no directories: Triton takes a prefix with no object under it for a
        # missing repository. A folder marker (the prefix itself as an empty object) is
        # what an empty directory looks like there, and what Triton's listing skips.
        if self.s3.prefix and not self._call(
            self._client.list_objects_v2, Bucket=self.s3.bucket, Prefix=self._dir(""), MaxKeys=1
        ).get("KeyCount", 0):
            self._call(self._client.put_object, Bucket=self.s3.bucket, Key=self._dir(""), Body=b"")

    # --- publishing
    def stage(self, name: str, *, replace: bool = False) -> S3Staging:
        return S3Staging(self, name, replace=replace)

    def publish(self, staged: Path, name: str, *, replace: bool = False) -> None:
        """Upload ``staged`` as ``name``: every file, then metadata.json, then config.pbtxt."""
        files = upload_order(staged)
        if replace:
            self.delete(name)  # an old model's files must not mix with the new one's
        elif self.exists(name):
            raise TargetExistsError(exists_message(self.describe(name)))
        # Counted before each upload: one interrupted mid-way may have landed all the same.
        uploaded: list[str] = []
        try:
            for relative in files:
                key = self.s3.key(name, relative)
                uploaded.append(key)
                # The last file completes the model: config.pbtxt, or a gateway-only model's metadata.json.
                if relative == files[-1] and relative in (CONFIG_FILE, METADATA_FILE):
                    self._put_exclusive(key, (staged / relative).read_bytes(), name)
                else:
                    self._call(self._client.upload_file, str(staged / relative), self.s3.bucket, key)
        except TargetExistsError:
            raise  # the objects are the winner's now: nothing here to take back
        except BaseException:
            self._delete_quietly(uploaded)
            raise

    def _put_exclusive(self, key: str, body: bytes, name: str) -> None:
        try:
            self._client.put_object(Bucket=self.s3.bucket, Key=key, Body=body, IfNoneMatch="*")
        except ClientError as error:
            if _code(error) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise TargetExistsError(exists_message(self.describe(name))) from None
            if _code(error) not in ("NotImplemented", "501"):
                raise self._error(error) from None
            # A service without conditional writes: the check before uploading must do.
            self._call(self._client.put_object, Bucket=self.s3.bucket, Key=key, Body=body)
        except BotoCoreError as error:
            raise self._error(error) from None

    # --- reading
    def exists(self, name: str) -> bool:
        answer = self._call(self._client.list_objects_v2, Bucket=self.s3.bucket, Prefix=self._dir(name), MaxKeys=1)
        return answer.get("KeyCount", 0) > 0

    def metadata(self, name: str) -> ModelMetadata | None:
        body = self._get(self.s3.key(name, METADATA_FILE))
        if body is None:
            return None
        try:
            return ModelMetadata.model_validate_json(body)
        except ValueError:
            return None

    def names(self) -> list[str]:
        prefix = self._dir("")
        found = set()
        for page in self._pages(Prefix=prefix, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"][len(prefix):].rstrip("/")
                if name and not name.startswith("."):
                    found.add(name)
        return sorted(found)

    def fetch(self, name: str, *, into: Path | None = None) -> Path:
        if into is not None:
            keys = self._keys(name)
            if self.s3.key(name, METADATA_FILE) not in keys:
                raise RepositoryError(f"model {self.describe(name)} is not in the repository (no {METADATA_FILE})")
            self._download(keys, name, into)
            return into
        body = self._get(self.s3.key(name, METADATA_FILE))
        if body is None:
            raise RepositoryError(f"model {self.describe(name)} is not in the repository (no {METADATA_FILE})")
        # Each conversion's metadata is its own (it has its creation time), so it names the
        # copy: a copy, once complete, is never rewritten, and gateways sharing the cache
        # never see one change under them.
        home = self.cache_dir / name
        copy = home / hashlib.sha256(body).hexdigest()[:16]
        if not copy.is_dir():
            home.mkdir(parents=True, exist_ok=True)
            fresh = home / f".fetch-{secrets.token_hex(6)}"
            try:
                # What the gateway serves the model with: its tokenizer, its other routes' files,
                # and a model it computes whole, its static weights.
                keys = self._keys(name, TOKENIZER_DIR) + self._keys(name, ROUTES_DIR)
                if _gateway_only(body):
                    keys.append(self.s3.key(name, STATIC_WEIGHTS_FILE))
                self._download(keys, name, fresh)
                (fresh / METADATA_FILE).write_bytes(body)
                try:
                    os.rename(fresh, copy)
                except OSError:
                    if not copy.is_dir():
                        raise
                    # Another gateway's copy of the same conversion arrived first.
            finally:
                shutil.rmtree(fresh, ignore_errors=True)
        for other in home.iterdir():
            if other != copy and not other.name.startswith("."):
                shutil.rmtree(other, ignore_errors=True)  # copies of earlier conversions
        return copy

    # --- removing
    def delete(self, name: str) -> None:
        keys = self._keys(name)
        config = self.s3.key(name, CONFIG_FILE)
        if config in keys:
            self._delete_keys([config])
        self._delete_keys([key for key in keys if key != config])
        shutil.rmtree(self.cache_dir / name, ignore_errors=True)

    def remove_partial(self, name: str) -> None:
        own = re.compile(rf"{re.escape(name)}-[0-9a-f]{{12}}")
        staging = self.cache_dir / STAGING_DIR
        if staging.is_dir():
            for leftover in staging.iterdir():
                if own.fullmatch(leftover.name):
                    shutil.rmtree(leftover, ignore_errors=True)
        keys = self._keys(name)
        if keys and self.s3.key(name, CONFIG_FILE) not in keys and not self._gateway_only_model(name, keys):
            self._delete_keys(keys)

    def _gateway_only_model(self, name: str, keys: list[str]) -> bool:
        """A published model with no config.pbtxt: one the gateway computes whole, whose
        metadata.json, uploaded last, is what completes it."""
        body = self._get(self.s3.key(name, METADATA_FILE)) if self.s3.key(name, METADATA_FILE) in keys else None
        return body is not None and _gateway_only(body)

    # --- the manifest: a small object beside the models
    def read_manifest(self) -> list[str]:
        body = self._get(self.s3.key(MANIFEST_FILE))
        try:
            names = json.loads(body) if body is not None else []
        except ValueError:
            return []
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    def write_manifest(self, names: list[str]) -> None:
        self._call(
            self._client.put_object, Bucket=self.s3.bucket, Key=self.s3.key(MANIFEST_FILE),
            Body=json.dumps(names).encode(), ContentType="application/json",
        )

    # --- S3 calls
    def _dir(self, name: str) -> str:
        key = self.s3.key(name)
        return f"{key}/" if key else ""

    def _pages(self, **query):
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            yield from paginator.paginate(Bucket=self.s3.bucket, **query)
        except (ClientError, BotoCoreError) as error:
            raise self._error(error) from None

    def _keys(self, name: str, under: str = "") -> list[str]:
        prefix = self._dir(name) + (f"{under}/" if under else "")
        return [item["Key"] for page in self._pages(Prefix=prefix) for item in page.get("Contents", [])]

    def _get(self, key: str) -> bytes | None:
        try:
            return self._client.get_object(Bucket=self.s3.bucket, Key=key)["Body"].read()
        except ClientError as error:
            if _code(error) in _NOT_FOUND:
                return None
            raise self._error(error) from None
        except BotoCoreError as error:
            raise self._error(error) from None

    def _download(self, keys: list[str], name: str, directory: Path) -> None:
        for key in keys:
            path = directory / _relative(key, self._dir(name))
            path.parent.mkdir(parents=True, exist_ok=True)
            self._call(self._client.download_file, self.s3.bucket, key, str(path))

    def _delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": key} for key in keys[start:start + _DELETE_BATCH]]
            answer = self._call(self._client.delete_objects, Bucket=self.s3.bucket, Delete={"Objects": batch, "Quiet": True})
            if answer.get("Errors"):
                failed = answer["Errors"][0]
                raise RepositoryError(
                    f"S3 repository {self.location}: could not delete {failed.get('Key')}: {failed.get('Message')}"
                )

    def _delete_quietly(self, keys: list[str]) -> None:
        try:
            self._delete_keys(keys)
        except Exception:  # noqa: BLE001 - the original failure is the one to report
            pass

    def _call(self, method, *args, **kwargs):
        try:
            return method(*args, **kwargs)
        except (ClientError, BotoCoreError) as error:
            raise self._error(error) from None

    def _error(self, error: Exception) -> RepositoryError:
        # botocore's messages name the operation and the endpoint, never the credentials.
        return RepositoryError(f"S3 repository {self.location}: {error}")


def _relative(key: str, directory: str) -> str:
    return key[len(directory):]


def _gateway_only(metadata: bytes) -> bool:
    try:
        return ModelMetadata.model_validate_json(metadata).gateway_only
    except ValueError:
        return False


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))
