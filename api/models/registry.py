"""Which models exist in the repository, which are loaded in Triton, and how they get there.

The registry is the gateway's source of truth for "is this model loaded": inference
asks it (an in-memory lookup) instead of asking Triton on every request. Loads, unloads
and deletes of one model are serialized by a per-model lock, so concurrent loads of one
model convert it once.

What is served, the lookups, unloads, deletes and reloads after Triton restarts are here;
loads (converting, restoring, adopting, refreshing) are its ``Loads`` (``loading.py``), and
models whose process died its ``LostProcesses`` (``lost.py``): objects it holds, each given
the part of it they need.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from embedgate.contract.spec import ModelMetadata

from ..compute.backend.base import Backend
from ..compute.requests.kinds import KINDS, kind_of
from ..compute.requests.served import ServedModel
from ..compute.scheduling.batching import BatchingPolicy
from ..errors import EmbedgateError, InvalidInput, ModelNotFound, ModelNotLoaded
from ..settings import Settings
from .control import LoadOutcome
from .loading import Loads
from .lost import LostProcesses
from .manifest import Manifest
from .memory import MemoryMeter
from .names import clip_key, is_triton_name
from .on_disk import OnDisk, find_on_disk
from .refs import ModelRef
from .repository import off_loop, open_for
from .residency import Residency

log = logging.getLogger("embedgate.registry")


class ModelRegistry:
    def __init__(self, settings: Settings, backend: Backend, *, keep_manifest: bool = True):
        self.settings = settings
        # What runs the models: their parts are loaded, reloaded and unloaded through it.
        self.backend = backend
        self.repository = open_for(settings)
        self._manifest = Manifest(self.repository, kept=keep_manifest)
        self.batching = BatchingPolicy(settings, gpu=lambda: backend.has_gpu())
        self._served: dict[str, ServedModel] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Remote repository: the models this registry has seen there (a request for a model
        # that is not loaded is answered from this, never by a call to the bucket).
        self._seen: set[str] = set()
        # Told after the set of served models changed (a model added, or taken out before
        # Triton unloads it): the primary of several gateway workers tells them all.
        self.on_change: Callable[[], Awaitable[None]] | None = None
        # How models come to be served.
        self.loads = Loads(self)
        # Models whose process died in Triton, loaded again.
        self.lost = LostProcesses(self)
        # Each model's memory, the memory budget and the keep-alive of idle models.
        self.residency = Residency(self, MemoryMeter(backend))

    # --- lookups (hot path: no I/O unless the model is missing)
    def served(self, name: str, pretrained: str | None = None) -> ServedModel:
        model = self._served.get(name if pretrained is None else clip_key(name, pretrained))
        if model is not None:
            return model
        ref = ModelRef.named(name, pretrained)
        served_as = next((m.name for m in self._served.values() if m.metadata.model_name == name), None)
        if pretrained is None and served_as is not None:
            raise InvalidInput(f"model '{name}' is served as '{served_as}': give its pretrained too")
        if self._in_repository(ref):
            raise ModelNotLoaded(f"model '{ref.described()}' is in the repository but not loaded", key=ref.key)
        if self.repository.remote and self.settings.load_on_first_request:
            # Not read here: whether the remote repository holds it is the load's to find
            # (a 404 from there where it does not), as another replica may have converted it.
            raise ModelNotLoaded(f"model '{ref.described()}' is not loaded", key=ref.key)
        raise ModelNotFound(f"model '{ref.described()}' is not in the repository; load it first")

    def _in_repository(self, ref: ModelRef) -> bool:
        """Whether a model that is not loaded is in the repository, for the error that says
        so. A local repository is read; a remote one is never called on the request path:
        the answer is whether this registry has seen the model there."""
        if self.repository.remote:
            return all(part in self._seen for part in ref.parts())
        return self.find(ref)[0] is OnDisk.PUBLISHED

    def loaded(self) -> list[ServedModel]:
        return list(self._served.values())

    def is_served(self, key: str) -> bool:
        """Whether the model a registry key names is loaded (a bulk job's models)."""
        return key in self._served

    def held(self, key: str) -> ServedModel | None:
        """The loaded model of a registry key, or None."""
        return self._served.get(key)

    def read_metadata(self, triton_name: str) -> ModelMetadata | None:
        """The model's metadata.json (blocking: off the event loop for a remote repository)."""
        metadata = self.repository.metadata(triton_name)
        if metadata is None:
            self._seen.discard(triton_name)
        else:
            self._seen.add(triton_name)
        return metadata

    def find(self, ref: ModelRef) -> tuple[OnDisk, ModelMetadata | None]:
        """Where ``ref`` stands in the repository (blocking)."""
        return find_on_disk(self.repository.exists, self.read_metadata, ref)

    def saw(self, parts: tuple[str, ...]) -> None:
        """``parts`` are in the repository now (just published)."""
        self._seen.update(parts)

    async def on_disk(self) -> list[ModelMetadata]:
        return await off_loop(self._scan)

    def _scan(self) -> list[ModelMetadata]:
        found = []
        for name in self.repository.names():
            if is_triton_name(name):
                metadata = self.read_metadata(name)
                if metadata is not None and metadata.kind not in KINDS:
                    log.warning("%s holds a model of a kind this gateway does not serve (%s)", name, metadata.kind)
                    continue
                # A model of several parts is listed once, from its first (published last).
                if metadata is not None and kind_of(metadata).parts(metadata.triton_name)[0] == name:
                    found.append(metadata)
        return found

    # --- loads (loading.py)
    async def load_sentence_transformer(self, name: str, model_path: str | None = None, **options: Any) -> LoadOutcome:
        """A sentence-transformers model of any of its classes (``Loads.sentence_transformer``);
        ``pinned``, ``keep_alive``: its terms (``residency.py``)."""
        pinned, keep_alive = options.pop("pinned", None), options.pop("keep_alive", None)
        return self._agreed(await self.loads.sentence_transformer(name, model_path, **options), pinned, keep_alive)

    async def load_clip(self, model_name: str, pretrained: str, **options: Any) -> LoadOutcome:
        """An OpenCLIP model: one model here, two Triton models (``Loads.clip``)."""
        pinned, keep_alive = options.pop("pinned", None), options.pop("keep_alive", None)
        return self._agreed(await self.loads.clip(model_name, pretrained, **options), pinned, keep_alive)

    def _agreed(self, outcome: LoadOutcome, pinned: bool | None, keep_alive: float | None) -> LoadOutcome:
        self.residency.agreed(outcome.model.name, fresh=not outcome.already_loaded, pinned=pinned, keep_alive_s=keep_alive)
        return outcome

    async def restore(self, key: str) -> LoadOutcome:
        """A model named as in the manifest, served as the repository holds it."""
        return await self.loads.restore(key)

    async def adopt(self, key: str) -> ServedModel:
        """Serve a model another process loaded into the Triton this registry shares."""
        return await self.loads.adopt(key)

    async def refresh(self, key: str) -> None:
        """Serve a loaded model as the repository holds it now."""
        await self.loads.refresh(key)

    # --- management
    async def serve(self, model: ServedModel, *, announce: bool = True) -> None:
        """Serve ``model`` (loaded) from now on; ``announce``: tell ``on_change``."""
        model.last_used = time.monotonic()  # its keep-alive counts from here
        self._served[model.name] = model
        if announce:
            await self._changed()

    async def _changed(self) -> None:
        if self.on_change is not None:
            await self.on_change()

    def forget(self, key: str) -> None:
        """No longer serve a model another process unloaded (or is about to)."""
        self._served.pop(key, None)

    async def unload(self, name: str, pretrained: str | None = None) -> None:
        ref = ModelRef.named(name, pretrained)
        async with self._locks[ref.triton_name]:
            if ref.key not in self._served:
                self.served(name, pretrained)  # raises 404 or 409 with the right message
            await self.stop_serving(self._served[ref.key])
            log.info("model %s unloaded", ref.key)

    async def stop_serving(self, model: ServedModel) -> None:
        """Taken out of the served models (the lock held), then unloaded from Triton."""
        self._served.pop(model.name, None)
        await self.write_manifest()
        await self._changed()
        await self._unload(model)

    async def delete(self, name: str, pretrained: str | None = None) -> None:
        ref = ModelRef.named(name, pretrained)
        async with self._locks[ref.triton_name]:
            state, _ = await off_loop(self.find, ref)
            if state in (OnDisk.ABSENT, OnDisk.CONFLICT):
                raise ModelNotFound(f"model '{ref.described()}' is not in the repository")
            model = self._served.get(ref.key)
            if model is not None:
                await self.stop_serving(model)
            # The first part first: without it the model is no longer listed.
            for part in ref.every_part():
                # A missing part (of an interrupted publish) is no error.
                await off_loop(self.repository.delete, part)
                self._seen.discard(part)
            log.info("model %s deleted from the repository", ref.key)

    async def _unload(self, model: ServedModel) -> None:
        # A model slow to let go is answered as unloaded: the gateway no longer serves it.
        await self.backend.unload(model, timeout_s=self.settings.request_timeout_s)

    def lock(self, triton_name: str) -> asyncio.Lock:
        """The lock that serializes the loads, unloads and deletes of one model."""
        return self._locks[triton_name]

    async def reload_lost(self, key: str, part: str, sent_at: float) -> None:
        await self.lost.reload(key, part, sent_at)

    async def process_exited(self, part: str) -> None:
        await self.lost.exited(part)

    async def reload_all(self) -> None:
        """After a Triton restart: load again every model that was loaded."""
        await self._reload(list(self._served.values()))

    async def reload_missing(self) -> None:
        """A server nobody here watches (an external Triton) that restarted has forgotten
        its models: load again the served ones it no longer has."""
        held = await self.backend.held()
        lost = [model for model in self._served.values() if not all(part in held for part in model.triton_names)]
        for model in lost:
            log.warning("triton no longer has %s (restarted?); loading it again", model.name)
        await self._reload(lost)

    async def _reload(self, models: list[ServedModel]) -> None:
        for model in models:
            async with self._locks[model.triton_name]:
                if self._served.get(model.name) is not model:
                    continue  # unloaded meanwhile
                try:
                    await self.backend.load_again(model)
                    log.info("reloaded %s", model.name)
                except EmbedgateError as exc:
                    log.error("could not reload %s: %s", model.name, exc.message)

    # --- manifest: the models to bring back when the gateway restarts
    def manifest(self) -> list[str]:
        """The models to bring back (blocking: call it off the event loop)."""
        return self._manifest.read()

    async def write_manifest(self) -> None:
        await self._manifest.write(list(self._served))
