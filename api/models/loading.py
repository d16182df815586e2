"""How a model comes to be served: loaded (converted first where the repository lacks it,
or holds a copy made from another source), restored from the manifest, adopted from what
another process loaded into the same Triton, or refreshed where another process converted
it again; its parts loaded into Triton whole or not at all.

The registry (``registry.py``) owns what is served and the per-model locks; this is its
part that brings models in.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

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
from .source_change import OnSourceChange, converts_again
from .sources import check_model_path, check_pretrained, check_revision
from .specs import conversion_spec

log = logging.getLogger("embedgate.registry")


class Loading:
    """The registry's loads, on the registry's own state (set by its ``__init__``) and its
    lookups, notifications, unloads and manifest."""

    settings: Settings
    backend: Backend
    repository: ModelRepository
    batching: BatchingPolicy
    _served: dict[str, ServedModel]
    _locks: defaultdict[str, asyncio.Lock]
    # The progress of the load running now, by Triton name: a load that waits for it follows it.
    _running: dict[str, Progress]
    _seen: set[str]
    _find: Callable[[ModelRef], tuple[OnDisk, ModelMetadata | None]]
    _changed: Callable[[], Awaitable[None]]
    _stop_serving: Callable[[ServedModel], Awaitable[None]]
    _write_manifest: Callable[[], Awaitable[None]]

    async def load_sentence_transformer(
        self,
        name: str,
        model_path: str | None = None,
        *,
        trust_remote_code: bool = False,
        revision: str | None = None,
        on_source_change: OnSourceChange = "convert",
        progress: Progress | None = None,
    ) -> LoadOutcome:
        """A sentence-transformers model of any of its classes (the directory says which);
        ``revision``: the hub's branch, tag or commit of it."""
        ref = ModelRef.named(name)
        check_revision(revision, model_path=model_path)
        model_path = check_model_path(self.settings, model_path, trust_remote_code)
        source = {"model_path": model_path, "trust_remote_code": trust_remote_code, "revision": revision}
        return await self._load(ref, progress, on_source_change, **source)

    async def load_clip(
        self,
        model_name: str,
        pretrained: str,
        *,
        revision: str | None = None,
        on_source_change: OnSourceChange = "convert",
        progress: Progress | None = None,
    ) -> LoadOutcome:
        """An OpenCLIP model: one model in the registry, two Triton models (text, image);
        ``revision``: the hub's, of an ``hf-hub:`` pretrained."""
        ref = ModelRef.named(model_name, pretrained)
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
        lock = self._locks[ref.triton_name]
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
            if await converts_again(
                ref, metadata.made_from, on_source_change, source.get("model_path"), source.get("revision")
            ):
                progress.step("converting again: the repository's copy was made from another source")
                metadata, replace = None, True
            elif self.settings.late_chunking and kind_of(metadata).converted_without_late_chunking():
                progress.step("converting again: late chunking is on, and the repository's copy was converted without it")
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
        try:
            await self.backend.load(model.triton_names, fresh=new_files or replacing is not None)
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
