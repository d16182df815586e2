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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from embedgate.converters.repository import RepositoryError
from embedgate.converters.spec import (
    TOKENIZER_DIR,
    ConversionSpec,
    ModelMetadata,
    clip_part_names,
)

from ..compute.batching import BatchingPolicy
from ..compute.preprocess.clip_text import AnyClipTokenizer, clip_tokenizer
from ..compute.preprocess.text import TextTokenizer
from ..compute.served import ServedModel
from ..errors import (
    ConversionTargetExists,
    EmbedgateError,
    Forbidden,
    InvalidInput,
    ModelConflict,
    ModelNotFound,
    ModelNotLoaded,
)
from ..settings import Settings
from ..triton.client import TritonClient
from .clip import OnDisk, check_pretrained, find_on_disk
from .conversion import run_conversion
from .names import clip_key, clip_triton_name, is_triton_name, split_clip_key, split_variant, to_triton_name
from .progress import Progress
from .repository import RepositoryUnavailable, off_loop, open_for

log = logging.getLogger("embedgate.registry")

@dataclass(frozen=True)
class LoadOutcome:
    model: ServedModel
    already_loaded: bool
    converted: bool


class ModelControl(Protocol):
    """What the management routes call: the registry itself on one machine, or the
    cluster's desired state (which loads through every replica's registry)."""

    async def load_sentence_transformer(self, name: str, model_path: str | None = None, **options: Any) -> LoadOutcome: ...

    async def load_clip(self, model_name: str, pretrained: str, *, progress: Progress | None = None) -> LoadOutcome: ...

    async def unload(self, name: str, pretrained: str | None = None) -> None: ...

    async def delete(self, name: str, pretrained: str | None = None) -> None: ...


class ModelRegistry:
    def __init__(self, settings: Settings, client: TritonClient, *, keep_manifest: bool = True):
        self.settings = settings
        self.client = client
        # One gateway keeps a manifest of its models for restarts; replicas of a cluster
        # share a repository and are told their models instead.
        self.keep_manifest = keep_manifest
        self.repository = open_for(settings)
        self.batching = BatchingPolicy(settings)
        self._served: dict[str, ServedModel] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Remote repository: the models this registry has seen there (a request for a model
        # that is not loaded is answered from this, never by a call to the bucket).
        self._seen: set[str] = set()
        self._manifest_lock = asyncio.Lock()

    # --- lookups (hot path: no I/O unless the model is missing)
    def served(self, name: str, pretrained: str | None = None) -> ServedModel:
        key = name if pretrained is None else clip_key(name, pretrained)
        model = self._served.get(key)
        if model is not None:
            return model
        if pretrained is not None:
            triton_name = clip_triton_name(name, pretrained)
            if self._in_repository(triton_name, name, pretrained):
                raise ModelNotLoaded(f"CLIP model '{name}' ({pretrained}) is in the repository but not loaded")
            raise ModelNotFound(f"CLIP model '{name}' ({pretrained}) is not in the repository; load it first")
        triton_name = to_triton_name(name)
        if any(m.metadata.clip and m.metadata.model_name == name for m in self._served.values()):
            raise InvalidInput(f"model '{name}' is a CLIP model: give its pretrained too")
        if not self._in_repository(triton_name, name, None):
            raise ModelNotFound(f"model '{name}' is not in the repository; load it first")
        raise ModelNotLoaded(f"model '{name}' is in the repository but not loaded")

    def _in_repository(self, triton_name: str, name: str, pretrained: str | None) -> bool:
        """Whether a model that is not loaded is in the repository, for the error that says
        so. A local repository is read; a remote one is never called on the request path:
        the answer is whether this registry has seen the model there."""
        if self.repository.remote:
            parts = clip_part_names(triton_name) if pretrained is not None else (triton_name,)
            return all(part in self._seen for part in parts)
        if pretrained is None:
            return self.read_metadata(triton_name) is not None
        return self._find_clip(triton_name, name, pretrained)[0] is OnDisk.PUBLISHED

    def loaded(self) -> list[ServedModel]:
        return list(self._served.values())

    def read_metadata(self, triton_name: str) -> ModelMetadata | None:
        """The model's metadata.json (blocking: off the event loop for a remote repository)."""
        metadata = self.repository.metadata(triton_name)
        if metadata is None:
            self._seen.discard(triton_name)
        else:
            self._seen.add(triton_name)
        return metadata

    def _find_clip(self, triton_name: str, model_name: str, pretrained: str) -> tuple[OnDisk, ModelMetadata | None]:
        return find_on_disk(self.repository.exists, self.read_metadata, triton_name, model_name, pretrained)

    async def on_disk(self) -> list[ModelMetadata]:
        return await off_loop(self._scan)

    def _scan(self) -> list[ModelMetadata]:
        found = []
        for name in self.repository.names():
            if is_triton_name(name):
                metadata = self.read_metadata(name)
                # A CLIP model is listed once, from its text part (published last).
                if metadata is not None and (
                    metadata.clip is None or name == clip_part_names(metadata.triton_name)[0]
                ):
                    found.append(metadata)
        return found

    # --- management
    def _check_source(self, model_path: str | None, trust_remote_code: bool) -> str | None:
        """A request's model_path and trust_remote_code, checked against the settings."""
        if trust_remote_code and not self.settings.allow_trust_remote_code:
            raise Forbidden("trust_remote_code is disabled on this server")
        if model_path is None:
            return None
        path = Path(model_path)
        if not path.is_absolute() or "\0" in model_path:
            raise InvalidInput("model_path must be an absolute path")
        resolved = path.resolve()
        roots = [root.resolve() for root in self.settings.local_model_dirs]
        if roots and not any(resolved.is_relative_to(root) for root in roots):
            raise Forbidden("model_path is outside the directories this server loads models from")
        if not resolved.is_dir():
            raise ModelNotFound("model_path is not a directory on the server")
        return str(resolved)

    async def load_sentence_transformer(
        self,
        name: str,
        model_path: str | None = None,
        *,
        trust_remote_code: bool = False,
        progress: Progress | None = None,
    ) -> LoadOutcome:
        triton_name = to_triton_name(name)
        model_path = self._check_source(model_path, trust_remote_code)
        progress = progress or Progress(name)
        async with self._locks[triton_name]:
            if name in self._served:
                return LoadOutcome(self._served[name], already_loaded=True, converted=False)
            metadata = await off_loop(self.read_metadata, triton_name)
            converted = False
            if metadata is None:
                if await off_loop(self.repository.exists, triton_name):
                    raise ModelConflict(
                        f"repository entry '{triton_name}' exists but is not an embedgate model"
                    )
                # A variant ("<name>@int8") is converted from its model, with its own threshold.
                base_name, variant = split_variant(name)
                spec = self._spec(
                    model_name=base_name,
                    variant=variant,
                    model_path=model_path,
                    triton_name=triton_name,
                    parity_threshold=(
                        self.settings.int8_parity_threshold if variant == "int8" else self.settings.parity_threshold
                    ),
                    trust_remote_code=trust_remote_code,
                )
                metadata = await self._convert(spec, progress, (triton_name,))
                converted = True
            progress.step("loading into Triton")
            model = await self._activate(name, triton_name, metadata)
            progress.step("ready")
            await self._write_manifest()
            return LoadOutcome(model, already_loaded=False, converted=converted)

    async def load_clip(self, model_name: str, pretrained: str, *, progress: Progress | None = None) -> LoadOutcome:
        """An OpenCLIP model: one model in the registry, two Triton models (text, image)."""
        triton_name = clip_triton_name(model_name, pretrained)
        check_pretrained(self.settings, pretrained)
        key = clip_key(model_name, pretrained)
        progress = progress or Progress(key)
        async with self._locks[triton_name]:
            if key in self._served:
                return LoadOutcome(self._served[key], already_loaded=True, converted=False)
            state, metadata = await off_loop(self._find_clip, triton_name, model_name, pretrained)
            if state is OnDisk.CONFLICT:
                raise ModelConflict(
                    f"repository entries {' and '.join(clip_part_names(triton_name))} hold another model"
                )
            converted = False
            if metadata is None:
                config_dir = self.settings.clip_model_config_dir
                spec = self._spec(
                    kind="clip",
                    model_name=model_name,
                    pretrained=pretrained,
                    clip_model_config_dir=str(config_dir.resolve()) if config_dir else None,
                    triton_name=triton_name,
                    parity_threshold=self.settings.parity_threshold,
                    replace=state is OnDisk.HALF_PUBLISHED,
                )
                metadata = await self._convert(spec, progress, clip_part_names(triton_name))
                converted = True
            progress.step("loading into Triton")
            model = await self._activate(key, triton_name, metadata)
            progress.step("ready")
            await self._write_manifest()
            return LoadOutcome(model, already_loaded=False, converted=converted)

    def _spec(self, **job: Any) -> ConversionSpec:
        """A conversion job into this registry's repository, with this server's settings."""
        return ConversionSpec(
            repository=self.repository.location,
            repository_cache_dir=str(self.settings.repository_cache),
            triton=self.batching.triton_options(job.get("kind", "sentence_transformer")),
            allow_network=self.settings.allow_hub_download,
            **job,
        )

    async def restore(self, key: str) -> LoadOutcome:
        """Load a model named as in the manifest: a model name or a CLIP model's key."""
        clip = split_clip_key(key)
        return await (self.load_clip(*clip) if clip else self.load_sentence_transformer(key))

    async def _convert(self, spec: ConversionSpec, progress: Progress, staged: tuple[str, ...]) -> ModelMetadata:
        try:
            metadata = await run_conversion(
                spec,
                timeout_s=self.settings.conversion_timeout_s,
                memory_limit_mb=self.settings.conversion_memory_limit_mb,
                on_line=progress.converter_line,
            )
        except ConversionTargetExists:
            raise  # another conversion's model, or its upload in progress: not ours to remove
        except BaseException:
            # A killed converter cannot clean up after itself.
            for triton_name in staged:
                await asyncio.to_thread(self._remove_partial, triton_name)
            raise
        self._seen.update(staged)
        return metadata

    async def _activate(self, name: str, triton_name: str, metadata: ModelMetadata) -> ServedModel:
        model = ServedModel(name, triton_name, metadata, await off_loop(self._tokenizer, triton_name, metadata))
        loads = [asyncio.create_task(self.client.load(part)) for part in model.triton_names]
        outcomes = await asyncio.gather(*loads, return_exceptions=True)
        failure = next((outcome for outcome in outcomes if isinstance(outcome, BaseException)), None)
        if failure is not None:
            # A CLIP model is served whole or not at all.
            for part, outcome in zip(model.triton_names, outcomes):
                if not isinstance(outcome, BaseException):
                    await asyncio.gather(self.client.unload(part), return_exceptions=True)
            raise failure
        self._served[name] = model
        log.info("model %s loaded (triton %s)", name, ", ".join(model.triton_names))
        return model

    def _tokenizer(self, triton_name: str, metadata: ModelMetadata) -> TextTokenizer | AnyClipTokenizer:
        # A remote repository's tokenizer comes from the gateway's cache, fetched when the
        # bucket holds a conversion the cache has no copy of.
        if metadata.clip is not None:
            text_part = self.repository.fetch(clip_part_names(triton_name)[0])
            return clip_tokenizer(text_part / TOKENIZER_DIR / "tokenizer.json", metadata.clip.text)
        return TextTokenizer(
            self.repository.fetch(triton_name) / TOKENIZER_DIR / "tokenizer.json",
            metadata.max_seq_length,
            metadata.strip_whitespace,
        )

    @staticmethod
    def _key(name: str, pretrained: str | None) -> tuple[str, str]:
        """(registry key, Triton name or CLIP base name) of a model named by a request."""
        if pretrained is None:
            return name, to_triton_name(name)
        return clip_key(name, pretrained), clip_triton_name(name, pretrained)

    async def unload(self, name: str, pretrained: str | None = None) -> None:
        key, triton_name = self._key(name, pretrained)
        async with self._locks[triton_name]:
            if key not in self._served:
                self.served(name, pretrained)  # raises 404 or 409 with the right message
            model = self._served.pop(key)
            await self._write_manifest()
            for part in model.triton_names:
                await self.client.unload(part)
            log.info("model %s unloaded", key)

    async def delete(self, name: str, pretrained: str | None = None) -> None:
        key, triton_name = self._key(name, pretrained)
        async with self._locks[triton_name]:
            if pretrained is None:
                if await off_loop(self.read_metadata, triton_name) is None:
                    raise ModelNotFound(f"model '{name}' is not in the repository")
                parts: tuple[str, ...] = (triton_name,)
            else:
                state, _ = await off_loop(self._find_clip, triton_name, name, pretrained)
                if state in (OnDisk.ABSENT, OnDisk.CONFLICT):
                    raise ModelNotFound(f"CLIP model '{name}' ({pretrained}) is not in the repository")
                # Text part first: without it the model is no longer listed.
                parts = clip_part_names(triton_name)
            model = self._served.pop(key, None)
            if model is not None:
                await self._write_manifest()
                for part in model.triton_names:
                    await self.client.unload(part)
            for part in parts:
                # A missing part (half of an interrupted CLIP publish) is no error.
                await off_loop(self.repository.delete, part)
                self._seen.discard(part)
            log.info("model %s deleted from the repository", key)

    def _remove_partial(self, triton_name: str) -> None:
        try:
            self.repository.remove_partial(triton_name)
        except RepositoryError as error:
            log.warning("could not remove what the conversion of %s left: %s", triton_name, error)

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
        try:
            return self.repository.read_manifest()
        except RepositoryError as error:
            log.error("could not read the manifest of loaded models: %s", error)
            return []

    async def _write_manifest(self) -> None:
        if not self.keep_manifest:
            return
        # Serialized, so the last state written is the latest one.
        async with self._manifest_lock:
            try:
                await off_loop(self.repository.write_manifest, sorted(self._served))
            except RepositoryUnavailable as error:
                # The model is loaded all the same; only a restart would miss it.
                log.error("could not write the manifest of loaded models: %s", error.message)
