"""The manifest of loaded models (``.embedgate-loaded.json`` in the repository): what a
gateway brings back when it restarts. A failure to read or write it is logged, never a
failed load: the model is served all the same, and only a restart would miss it."""

from __future__ import annotations

import asyncio
import logging

from embedgate.contract.repository import ModelRepository, RepositoryError

from .repository import RepositoryUnavailable, off_loop

log = logging.getLogger("embedgate.registry")


class Manifest:
    def __init__(self, repository: ModelRepository, *, kept: bool):
        self.repository = repository
        # One gateway keeps a manifest of its models for restarts; replicas of a cluster
        # share a repository and are told their models instead.
        self.kept = kept
        # Writes are serialized, so the last state written is the latest one.
        self._lock = asyncio.Lock()

    def read(self) -> list[str]:
        """The models to bring back (blocking: call it off the event loop)."""
        try:
            return self.repository.read_manifest()
        except RepositoryError as error:
            log.error("could not read the manifest of loaded models: %s", error)
            return []

    async def write(self, keys: list[str]) -> None:
        if not self.kept:
            return
        async with self._lock:
            try:
                await off_loop(self.repository.write_manifest, sorted(keys))
            except RepositoryUnavailable as error:
                log.error("could not write the manifest of loaded models: %s", error.message)
