"""Which models exist in the repository, which are loaded in Triton, and how they get there.

The registry is the gateway's source of truth for "is this model loaded": inference
asks it (an in-memory lookup) instead of asking Triton on every request. Loads, unloads
and deletes of one model are serialized by a per-model lock, so concurrent loads of one
model convert it once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from embedgate.contract.spec import ModelMetadata

from ..compute.backend.resend import Restartable, unloaded
from ..compute.requests.kinds import KINDS, kind_of
from ..compute.requests.served import ServedModel
from ..compute.scheduling.batching import BatchingPolicy
from ..errors import (
    EmbedgateError,
    InvalidInput,
    ModelConflict,
    ModelNotFound,
    ModelNotLoaded,
    TritonConnectionLost,
)
from ..settings import Settings
from ..triton.client import TritonClient
from .control import LoadOutcome
from .conversion import convert
from .lost import LostProcesses
from .manifest import Manifest
from .names import clip_key, is_triton_name
from .on_disk import OnDisk, find_on_disk
from .progress import Progress
from .refs import ModelRef
from .repository import off_loop, open_for
from .source_change import OnSourceChange, converts_again
from .sources import check_model_path, check_pretrained
from .specs import conversion_spec

log = logging.getLogger("embedgate.registry")


class ModelRegistry:
    def __init__(
        self,
        settings: Settings,
        client: TritonClient,
        triton: Restartable | None = None,
        *,
        keep_manifest: bool = True,
    ):
        self.settings = settings
        self.client = client
        # The supervisor of an embedded Triton: a load that Triton died under is made again
        # once it is back.
        self.triton = triton
        self.repository = open_for(settings)
        self._manifest = Manifest(self.repository, kept=keep_manifest)
        self.batching = BatchingPolicy(settings)
        self._served: dict[str, ServedModel] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Remote repository: the models this registry has seen there (a request for a model
        # that is not loaded is answered from this, never by a call to the bucket).
        self._seen: set[str] = set()
        # Told after the set of served models changed (a model added, or taken out before
        # Triton unloads it): the primary of several gateway workers tells them all.
        self.on_change: Callable[[], Awaitable[None]] | None = None
        # Models whose process died in Triton, loaded again.
        self.lost = LostProcesses(self)

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
            raise ModelNotLoaded(f"model '{ref.described()}' is in the repository but not loaded")
        raise ModelNotFound(f"model '{ref.described()}' is not in the repository; load it first")

    def _in_repository(self, ref: ModelRef) -> bool:
        """Whether a model that is not loaded is in the repository, for the error that says
        so. A local repository is read; a remote one is never called on the request path:
        the answer is whether this registry has seen the model there."""
        if self.repository.remote:
            return all(part in self._seen for part in ref.parts())
        return self._find(ref)[0] is OnDisk.PUBLISHED

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

    def _find(self, ref: ModelRef) -> tuple[OnDisk, ModelMetadata | None]:
        return find_on_disk(self.repository.exists, self.read_metadata, ref)

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

    # --- management
    async def load_sentence_transformer(
        self,
        name: str,
        model_path: str | None = None,
        *,
        trust_remote_code: bool = False,
        on_source_change: OnSourceChange = "convert",
        progress: Progress | None = None,
    ) -> LoadOutcome:
        """A sentence-transformers model of any of its classes (the directory says which)."""
        ref = ModelRef.named(name)
        model_path = check_model_path(self.settings, model_path, trust_remote_code)
        return await self._load(ref, progress, on_source_change, model_path=model_path, trust_remote_code=trust_remote_code)

    async def load_clip(
        self,
        model_name: str,
        pretrained: str,
        *,
        on_source_change: OnSourceChange = "convert",
        progress: Progress | None = None,
    ) -> LoadOutcome:
        """An OpenCLIP model: one model in the registry, two Triton models (text, image)."""
        ref = ModelRef.named(model_name, pretrained)
        check_pretrained(self.settings, pretrained)
        return await self._load(ref, progress, on_source_change)

    async def restore(self, key: str) -> LoadOutcome:
        """Load a model named as in the manifest: a model name or a CLIP model's key (its
        source checked against today's settings, as any load's), served as the repository
        holds it: its source is compared by the loads that decide, never again here."""
        ref = ModelRef.from_key(key)
        if ref.pretrained is not None:
            check_pretrained(self.settings, ref.pretrained)
        return await self._load(ref, None, None)

    async def _load(
        self, ref: ModelRef, progress: Progress | None, on_source_change: OnSourceChange | None, **source: Any
    ) -> LoadOutcome:
        """``on_source_change`` None: a restore, which does not compare sources."""
        progress = progress or Progress(ref.key)
        async with self._locks[ref.triton_name]:
            served = self._served.get(ref.key)
            if served is not None and on_source_change is None:
                return LoadOutcome(served, already_loaded=True, converted=False)
            # A loaded model is compared as it is served.
            state, metadata = (OnDisk.PUBLISHED, served.metadata) if served else await off_loop(self._find, ref)
            if state is OnDisk.CONFLICT:
                raise ModelConflict(
                    f"repository entries {' and '.join(ref.parts())} hold another model, or no embedgate model"
                )
            replace = state is OnDisk.HALF_PUBLISHED
            if metadata is not None and on_source_change is not None:
                # A copy made from another source than the load names is converted again, in its place.
                if await converts_again(ref, metadata.made_from, on_source_change, source.get("model_path")):
                    progress.step("converting again: the repository's copy was made from another source")
                    metadata, replace = None, True
            converted = metadata is None
            if metadata is None:
                # In a thread: the first spec asks PyTorch, in a subprocess, whether it sees a GPU.
                spec = await asyncio.to_thread(
                    conversion_spec, self.settings, self.repository.location, self.batching, ref, replace=replace, **source
                )
                metadata = await convert(spec, self.settings, self.repository, ref.every_part(), progress)
                self._seen.update(ref.parts_of(metadata))
            elif served is not None:
                return LoadOutcome(served, already_loaded=True, converted=False)
            progress.step("loading into Triton")
            model = await self._activate(ref.key, ref.triton_name, metadata, replacing=served, new_files=converted)
            progress.step("ready")
            await self._write_manifest()
            return LoadOutcome(model, already_loaded=False, converted=converted)

    async def _model(self, name: str, triton_name: str, metadata: ModelMetadata) -> ServedModel:
        # Everything a model is served with comes from the repository (its tokenizers, a
        # route's static weights), so a gateway worker that adopts it serves it the same. A
        # remote repository's files come from the gateway's cache, fetched when the bucket
        # holds a conversion the cache has no copy of.
        routes = await off_loop(kind_of(metadata).routes, self.repository.fetch, triton_name)
        return ServedModel(name, triton_name, metadata, routes[0].tokenizer, routes=routes)

    async def _activate(
        self,
        name: str,
        triton_name: str,
        metadata: ModelMetadata,
        *,
        replacing: ServedModel | None = None,
        new_files: bool = False,
    ) -> ServedModel:
        """Load the model in Triton and serve it; ``replacing``: the model served under this
        name until now (a conversion published in its place), which Triton serves until it
        has loaded the new one, and this registry until then too. ``new_files``: just
        converted, so a copy an external Triton holds already is an older one."""
        model = await self._model(name, triton_name, metadata)
        restarts = self.triton.restarts if self.triton is not None else 0
        reload = new_files or replacing is not None
        try:
            try:
                await self._load_parts(model, reload=reload)
            except TritonConnectionLost:
                # Triton died under the load (or was ended for a load that hung): once its
                # supervisor has it back, load again, so the caller sees a slower success.
                if self.triton is None or not await self.triton.wait_restarted(restarts):
                    raise
                log.warning("triton restarted while loading %s; loading it again", name)
                await self._load_parts(model, reload=reload)
        except BaseException:
            if replacing is not None:
                # Its parts in Triton are now the new copy's, or none: the old one is no
                # longer served as it was, and the new one is not ready.
                await self._stop_serving(replacing)
            raise
        # New routes, so new serials: the response cache never answers from the old copy's rows.
        self._served[name] = model
        log.info("model %s loaded (triton %s)", name, ", ".join(model.triton_names) or "none: the gateway computes it")
        await self._changed()
        return model

    async def _changed(self) -> None:
        if self.on_change is not None:
            await self.on_change()

    async def adopt(self, key: str) -> ServedModel:
        """Serve a model another process has loaded into the Triton this registry shares
        (a gateway worker's, loaded by its primary): read its metadata and tokenizer, and
        never load it in Triton."""
        ref = ModelRef.from_key(key)
        async with self._locks[ref.triton_name]:
            state, metadata = await off_loop(self._find, ref)
            if state is not OnDisk.PUBLISHED or metadata is None:
                raise ModelNotFound(f"model '{ref.described()}' is not in the repository")
            model = await self._model(ref.key, ref.triton_name, metadata)
            self._served[ref.key] = model
            return model

    async def refresh(self, key: str) -> None:
        """Serve a loaded model as the repository holds it now: where another process
        converted it again (the Ray replica that took a load from a changed source), load
        the new copy in this Triton in place of the old one. Each conversion's metadata is
        its own (its creation time, its source), so another metadata is another copy."""
        ref = ModelRef.from_key(key)
        async with self._locks[ref.triton_name]:
            served = self._served.get(ref.key)
            if served is None:
                return
            state, metadata = await off_loop(self._find, ref)
            if state is OnDisk.PUBLISHED and metadata is not None and metadata != served.metadata:
                log.info("model %s was converted again by another process; loading the new copy", key)
                await self._activate(ref.key, ref.triton_name, metadata, replacing=served)

    def forget(self, key: str) -> None:
        """No longer serve a model another process unloaded (or is about to)."""
        self._served.pop(key, None)

    async def _already_served(self, model: ServedModel) -> bool:
        """An external Triton that already serves every part of the model (another
        gateway loaded it): loading it again would replace its instances under that
        gateway's requests."""
        if self.triton is None or getattr(self.triton, "embedded", True):
            return False
        states = await self.client.repository_states()
        return all(states.get(part) == "READY" for part in model.triton_names)

    async def _load_parts(self, model: ServedModel, *, reload: bool = False) -> None:
        """``reload``: parts Triton holds already are of an older copy: load them anew."""
        if not reload and await self._already_served(model):
            log.info("model %s is already loaded in the external Triton; serving it as it is", model.name)
            return
        loads = [asyncio.create_task(self.client.load(part)) for part in model.triton_names]
        outcomes = await asyncio.gather(*loads, return_exceptions=True)
        failure = next((outcome for outcome in outcomes if isinstance(outcome, BaseException)), None)
        if failure is not None:
            # A CLIP model is served whole or not at all.
            for part, outcome in zip(model.triton_names, outcomes):
                if not isinstance(outcome, BaseException):
                    await asyncio.gather(self.client.unload(part), return_exceptions=True)
            raise failure

    async def unload(self, name: str, pretrained: str | None = None) -> None:
        ref = ModelRef.named(name, pretrained)
        async with self._locks[ref.triton_name]:
            if ref.key not in self._served:
                self.served(name, pretrained)  # raises 404 or 409 with the right message
            await self._stop_serving(self._served[ref.key])
            log.info("model %s unloaded", ref.key)

    async def _stop_serving(self, model: ServedModel) -> None:
        """Taken out of the served models (the lock held), then unloaded from Triton."""
        self._served.pop(model.name, None)
        await self._write_manifest()
        await self._changed()
        await self._unload(model)

    async def delete(self, name: str, pretrained: str | None = None) -> None:
        ref = ModelRef.named(name, pretrained)
        async with self._locks[ref.triton_name]:
            state, _ = await off_loop(self._find, ref)
            if state in (OnDisk.ABSENT, OnDisk.CONFLICT):
                raise ModelNotFound(f"model '{ref.described()}' is not in the repository")
            model = self._served.get(ref.key)
            if model is not None:
                await self._stop_serving(model)
            # The first part first: without it the model is no longer listed.
            for part in ref.every_part():
                # A missing part (of an interrupted publish) is no error.
                await off_loop(self.repository.delete, part)
                self._seen.discard(part)
            log.info("model %s deleted from the repository", ref.key)

    async def _unload(self, model: ServedModel) -> None:
        await unloaded(self.client.unload, model.triton_names, model.name, self.triton, self.settings.request_timeout_s)

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
        """An external Triton that restarted has forgotten its models: load again the
        served ones it no longer has."""
        states = await self.client.repository_states()
        lost = [
            model
            for model in self._served.values()
            if not all(states.get(part) in ("READY", "LOADING") for part in model.triton_names)
        ]
        for model in lost:
            log.warning("triton no longer has %s (restarted?); loading it again", model.name)
        await self._reload(lost)

    async def _reload(self, models: list[ServedModel]) -> None:
        for model in models:
            async with self._locks[model.triton_name]:
                if self._served.get(model.name) is not model:
                    continue  # unloaded meanwhile
                try:
                    for part in model.triton_names:
                        await self.client.load(part)
                    log.info("reloaded %s", model.name)
                except EmbedgateError as exc:
                    log.error("could not reload %s: %s", model.name, exc.message)

    # --- manifest: the models to bring back when the gateway restarts
    def manifest(self) -> list[str]:
        """The models to bring back (blocking: call it off the event loop)."""
        return self._manifest.read()

    async def _write_manifest(self) -> None:
        await self._manifest.write(list(self._served))
