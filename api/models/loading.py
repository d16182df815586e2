"""How a model comes to be served: loaded (converted first where the repository lacks it,
or holds a copy made from another source), restored from the manifest, adopted from what
another process loaded into the same Triton, or refreshed where another process converted
it again; its parts loaded into Triton whole or not at all.

The registry (``registry.py``) owns what is served and the per-model locks; it holds
these loads (:class:`Loads`), which bring models in through the narrow part of it they need
(:class:`Registry`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from embedgate.contract.repository import ModelRepository
from embedgate.contract.spec import ModelMetadata

from ..compute.backend.base import Backend
from ..compute.requests.kinds import kind_of
from ..compute.requests.served import ServedModel
from ..compute.scheduling.batching import BatchingPolicy
from ..errors import ModelConflict, ModelNotFound
from ..settings import Settings
from .control import LoadOutcome
from .conversion import convert
from .on_disk import OnDisk
from .progress import Progress
from .refs import ModelRef
from .repository import off_loop
from .residency import Residency
from .source_change import OnSourceChange, converts_again
from .sources import check_model_path, check_pretrained, check_revision
from .specs import conversion_spec

log = logging.getLogger("embedgate.registry")


class Registry(Protocol):
    """What of the registry the loads need: its settings, backend and repository, the
    served models and their locks, where a model stands in the repository, and what it does
    once a model is served or is no longer."""

    settings: Settings
    backend: Backend
    repository: ModelRepository
    batching: BatchingPolicy
    residency: Residency

    def held(self, key: str) -> ServedModel | None: ...

    def lock(self, triton_name: str) -> asyncio.Lock: ...

    def find(self, ref: ModelRef) -> tuple[OnDisk, ModelMetadata | None]:
        """Where ``ref`` stands in the repository (blocking)."""
        ...

    def saw(self, parts: tuple[str, ...]) -> None:
        """``parts`` are in the repository now."""
        ...

    async def serve(self, model: ServedModel, *, announce: bool = True) -> None:
        """Serve ``model`` from now on (``announce``: tell the registry's listeners)."""
        ...

    async def stop_serving(self, model: ServedModel) -> None: ...

    async def write_manifest(self) -> None: ...


class Loads:
    """The registry's loads, adoptions and refreshes, each under the model's lock."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self.settings = registry.settings
        # The progress of the load running now, by Triton name: a load that waits for it follows it.
        self._running: dict[str, Progress] = {}

    async def sentence_transformer(
        self,
        name: str,
        model_path: str | None = None,
        *,
        trust_remote_code: bool = False,
        revision: str | None = None,
        on_source_change: OnSourceChange = "convert",
        progress: Progress | None = None,
        from_repository: bool = False,
    ) -> LoadOutcome:
        """A sentence-transformers model of any of its classes (the directory says which);
        ``revision``: the hub's branch, tag or commit of it; ``from_repository``: as the
        repository holds it, never converted (a load on a request's behalf)."""
        ref = ModelRef.named(name)
        if from_repository:
            return await self._load(ref, progress, None, from_repository=True)
        check_revision(revision, model_path=model_path)
        model_path = check_model_path(self.settings, model_path, trust_remote_code)
        source = {"model_path": model_path, "trust_remote_code": trust_remote_code, "revision": revision}
        return await self._load(ref, progress, on_source_change, **source)

    async def clip(
        self,
        model_name: str,
        pretrained: str,
        *,
        revision: str | None = None,
        on_source_change: OnSourceChange = "convert",
        progress: Progress | None = None,
        from_repository: bool = False,
    ) -> LoadOutcome:
        """An OpenCLIP model: one model in the registry, two Triton models (text, image);
        ``revision``: the hub's, of an ``hf-hub:`` pretrained; ``from_repository``: as
        :meth:`sentence_transformer`."""
        ref = ModelRef.named(model_name, pretrained)
        if from_repository:
            return await self._load(ref, progress, None, from_repository=True)
        check_pretrained(self.settings, pretrained)
        check_revision(revision, pretrained=pretrained)
        return await self._load(ref, progress, on_source_change, revision=revision)

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
        lock = self.registry.lock(ref.triton_name)
        running = self._running.get(ref.triton_name) if lock.locked() else None
        if running is not None:
            # Its client follows the load under way (its steps, as they come) until its turn.
            progress.step("waiting for the load of this model under way")
            running.listen(progress.relay)
        try:
            async with lock:
                if running is not None:
                    running.unlisten(progress.relay)
                    running = None
                self._running[ref.triton_name] = progress
                try:
                    return await self._load_locked(ref, progress, on_source_change, **source)
                finally:
                    del self._running[ref.triton_name]
        finally:
            if running is not None:  # cancelled while waiting
                running.unlisten(progress.relay)

    async def _load_locked(
        self, ref: ModelRef, progress: Progress, on_source_change: OnSourceChange | None, **source: Any
    ) -> LoadOutcome:
        """:meth:`_load` with the model's lock held."""
        registry = self.registry
        served = registry.held(ref.key)
        if served is not None and on_source_change is None:
            return LoadOutcome(served, already_loaded=True, converted=False)
        # A loaded model is compared as it is served.
        state, metadata = (OnDisk.PUBLISHED, served.metadata) if served else await off_loop(registry.find, ref)
        if state is OnDisk.CONFLICT:
            raise ModelConflict(
                f"repository entries {' and '.join(ref.parts())} hold another model, or no embedgate model"
            )
        replace = state is OnDisk.HALF_PUBLISHED
        if metadata is not None and on_source_change is not None:
            # A copy made from another source than the load names is converted again, in its place.
            if await converts_again(
                ref, metadata.made_from, on_source_change, source.get("model_path"), source.get("revision")
            ):
                progress.step("converting again: the repository's copy was made from another source")
                metadata, replace = None, True
            elif self.settings.late_chunking and kind_of(metadata).converted_without_late_chunking():
                progress.step("converting again: late chunking is on, and the repository's copy was converted without it")
                metadata, replace = None, True
        converted = metadata is None
        if metadata is None and source.get("from_repository"):
            raise ModelNotFound(f"model '{ref.described()}' is not in the repository; load it first")
        if metadata is None:
            # In a thread: the first spec asks PyTorch, in a subprocess, whether it sees a GPU.
            spec = await asyncio.to_thread(
                conversion_spec, self.settings, registry.repository.location, registry.batching, ref, replace=replace, **source
            )
            metadata = await convert(spec, self.settings, registry.repository, ref.every_part(), progress)
            registry.saw(ref.parts_of(metadata))
        elif served is not None:
            return LoadOutcome(served, already_loaded=True, converted=False)
        progress.step("loading into Triton")
        model = await self._activate(ref.key, ref.triton_name, metadata, replacing=served, new_files=converted)
        progress.step("ready")
        await registry.write_manifest()
        return LoadOutcome(model, already_loaded=False, converted=converted)

    async def _model(self, name: str, triton_name: str, metadata: ModelMetadata) -> ServedModel:
        # Everything a model is served with comes from the repository (its tokenizers, a
        # route's static weights), so a gateway worker that adopts it serves it the same. A
        # remote repository's files come from the gateway's cache, fetched when the bucket
        # holds a conversion the cache has no copy of.
        routes = await off_loop(kind_of(metadata).routes, self.registry.repository.fetch, triton_name)
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
        try:
            if replacing is not None:  # its memory is counted already
                await self.registry.backend.load(model, fresh=True)
            else:
                async with self.registry.residency.loading(name, model.triton_names):
                    await self.registry.backend.load(model, fresh=new_files)
        except BaseException:
            if replacing is not None:
                # Its parts in Triton are now the new copy's, or none: the old one is no
                # longer served as it was, and the new one is not ready.
                await self.registry.stop_serving(replacing)
            raise
        # New routes, so new serials: the response cache never answers from the old copy's rows.
        log.info("model %s loaded (triton %s)", name, ", ".join(model.triton_names) or "none: the gateway computes it")
        await self.registry.serve(model)
        return model

    async def adopt(self, key: str) -> ServedModel:
        """Serve a model another process has loaded into the Triton this registry shares
        (a gateway worker's, loaded by its primary): read its metadata and tokenizer, and
        never load it in Triton."""
        ref = ModelRef.from_key(key)
        async with self.registry.lock(ref.triton_name):
            state, metadata = await off_loop(self.registry.find, ref)
            if state is not OnDisk.PUBLISHED or metadata is None:
                raise ModelNotFound(f"model '{ref.described()}' is not in the repository")
            model = await self._model(ref.key, ref.triton_name, metadata)
            await self.registry.serve(model, announce=False)
            return model

    async def refresh(self, key: str) -> None:
        """Serve a loaded model as the repository holds it now: where another process
        converted it again (the Ray replica that took a load from a changed source), load
        the new copy in this Triton in place of the old one. Each conversion's metadata is
        its own (its creation time, its source), so another metadata is another copy."""
        ref = ModelRef.from_key(key)
        async with self.registry.lock(ref.triton_name):
            served = self.registry.held(ref.key)
            if served is None:
                return
            state, metadata = await off_loop(self.registry.find, ref)
            if state is OnDisk.PUBLISHED and metadata is not None and metadata != served.metadata:
                log.info("model %s was converted again by another process; loading the new copy", key)
                await self._activate(ref.key, ref.triton_name, metadata, replacing=served)
