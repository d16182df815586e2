"""What every model repository offers, local or S3.

One ``<triton_name>/`` entry per Triton model (``config.pbtxt``, ``1/``, ``metadata.json``,
``tokenizer/``), and a manifest (``.embedgate-loaded.json``) of the models a gateway had
loaded. The converter stages and publishes; the gateway lists, reads metadata, fetches
what it needs locally (metadata and tokenizer, never the weights) and deletes. Every
method may block (disk or network): the gateway calls them off its event loop.
"""

from __future__ import annotations

import abc
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from embedgate.contract.spec import ModelMetadata

CONFIG_FILE = "config.pbtxt"
MANIFEST_FILE = ".embedgate-loaded.json"


class Stage(Protocol):
    """A model being written: files go into ``path``; ``publish()`` makes them one model."""

    path: Path
    # Where the model is published, for messages.
    target: str | Path

    def publish(self) -> object: ...


class ModelRepository(abc.ABC):
    # The canonical location (a local directory's absolute path, or the s3:// URL): what
    # Triton's --model-repository gets and what messages name. Never holds credentials.
    location: str
    remote: bool

    def describe(self, name: str) -> str:
        return f"{self.location}/{name}"

    @abc.abstractmethod
    def create(self) -> None:
        """Make sure the repository exists (Triton refuses to start on one that does not)."""

    @abc.abstractmethod
    def stage(self, name: str, *, replace: bool = False) -> AbstractContextManager[Stage]:
        """``with repository.stage(name) as stage:`` write into ``stage.path``, then
        ``stage.publish()``. Leaving the block without publishing discards everything,
        and a model is never visible to Triton half written. Refuses (TargetExistsError)
        a name already taken unless ``replace``."""

    @abc.abstractmethod
    def exists(self, name: str) -> bool:
        """Whether anything is stored under ``name``, an embedgate model or not."""

    @abc.abstractmethod
    def metadata(self, name: str) -> ModelMetadata | None:
        """The model's metadata.json; None when absent or unreadable as one."""

    @abc.abstractmethod
    def names(self) -> list[str]:
        """The entries of the repository, sorted (names starting with '.' excluded)."""

    @abc.abstractmethod
    def fetch(self, name: str, *, into: Path | None = None) -> Path:
        """A local directory holding the model's metadata.json, tokenizer/ and routes/ (its
        other routes' tokenizers and static weights): a local
        repository is its own copy; a remote one keeps a copy in its cache. With ``into``,
        a remote model's every file, the weights too, is downloaded there."""

    @abc.abstractmethod
    def delete(self, name: str) -> None:
        """Remove the model; its config goes first, so it is never loadable half deleted."""

    @abc.abstractmethod
    def remove_partial(self, name: str) -> None:
        """Remove what a conversion of ``name`` that was killed left behind (it could not
        clean up itself); a published model stays."""

    @abc.abstractmethod
    def read_manifest(self) -> list[str]: ...

    @abc.abstractmethod
    def write_manifest(self, names: list[str]) -> None: ...
