"""Which models exist in the repository, which are loaded in Triton, and how they get there.

The registry is the gateway's source of truth for "is this model loaded": inference
asks it (an in-memory lookup) instead of asking Triton on every request. Loads, unloads
and deletes of one model are serialized by a per-model lock, so concurrent loads of one
model convert it once.
"""

from __future__ import annotations

import asyncio
import glob
import json
import logging
import os
import re
import shutil
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from converters.spec import (
    METADATA_FILE,
    TOKENIZER_DIR,
    ConversionSpec,
    ModelMetadata,
    TritonConfigOptions,
    clip_part_names,
)

from .clip_models import OnDisk, check_pretrained, find_on_disk
from .conversion import run_conversion
from .auth import Forbidden
from .errors import ApiError, BadRequest, ModelNotFound, ModelNotLoaded, Overloaded
from .names import clip_key, clip_triton_name, is_triton_name, split_clip_key, to_triton_name
from .preprocess.clip_text import ClipTokenizer
from .preprocess.text import TextTokenizer
from .progress import Progress
from .settings import Settings
from .telemetry import tag_model
from .triton.client import TritonClient

log = logging.getLogger("embedgate.registry")

MANIFEST_FILE = ".embedgate-loaded.json"
STAGING_DIR = ".staging"


class ModelConflict(ApiError):
    status, code = 409, "model_conflict"


@dataclass
class ServedModel:
    # The registry's key: the model name, or "model_name:pretrained" for a CLIP model.
    name: str
    triton_name: str
    metadata: ModelMetadata
    tokenizer: TextTokenizer | ClipTokenizer
    inflight: int = field(default=0)

    @property
    def triton_names(self) -> tuple[str, ...]:
        """The Triton models it is made of: one, or a CLIP model's (text, image) towers."""
        return clip_part_names(self.triton_name) if self.metadata.clip else (self.triton_name,)


@dataclass(frozen=True)
class LoadOutcome:
    model: ServedModel
    already_loaded: bool
    converted: bool


class ModelRegistry:
    def __init__(self, settings: Settings, client: TritonClient):
        self.settings = settings
        self.client = client
        self.repository = settings.model_repository
        self._served: dict[str, ServedModel] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    # --- lookups (hot path: no I/O unless the model is missing)
    def served(self, name: str, pretrained: str | None = None) -> ServedModel:
        key = name if pretrained is None else clip_key(name, pretrained)
        model = self._served.get(key)
        if model is not None:
            tag_model(key)  # a loaded model: safe as a metrics label
            return model
        if pretrained is not None:
            triton_name = clip_triton_name(name, pretrained)
            state, _ = find_on_disk(self.repository, self.read_metadata, triton_name, name, pretrained)
            if state is OnDisk.PUBLISHED:
                raise ModelNotLoaded(f"CLIP model '{name}' ({pretrained}) is in the repository but not loaded")
            raise ModelNotFound(f"CLIP model '{name}' ({pretrained}) is not in the repository; load it first")
        triton_name = to_triton_name(name)
        if any(m.metadata.clip and m.metadata.model_name == name for m in self._served.values()):
            raise BadRequest(f"model '{name}' is a CLIP model: give its pretrained too")
        if self.read_metadata(triton_name) is None:
            raise ModelNotFound(f"model '{name}' is not in the repository; load it first")
        raise ModelNotLoaded(f"model '{name}' is in the repository but not loaded")

    def loaded(self) -> list[ServedModel]:
        return list(self._served.values())

    def read_metadata(self, triton_name: str) -> ModelMetadata | None:
        path = self.repository / triton_name / METADATA_FILE
        try:
            return ModelMetadata.model_validate_json(path.read_bytes())
        except (OSError, ValueError):
            return None

    def on_disk(self) -> list[ModelMetadata]:
        if not self.repository.is_dir():
            return []
        found = []
        for entry in sorted(self.repository.iterdir()):
            if entry.is_dir() and is_triton_name(entry.name):
                metadata = self.read_metadata(entry.name)
                # A CLIP model is listed once, from its text part (published last).
                if metadata is not None and (
                    metadata.clip is None or entry.name == clip_part_names(metadata.triton_name)[0]
                ):
                    found.append(metadata)
        return found

    # --- admission: a bounded number of requests in flight per model
    def admit(self, model: ServedModel) -> "_Admission":
        if model.inflight >= self.settings.max_inflight_requests:
            raise Overloaded(
                f"model '{model.name}' has {model.inflight} requests in flight "
                f"(limit {self.settings.max_inflight_requests}); retry shortly"
            )
        return _Admission(model)

    # --- management
    def _triton_options(self) -> TritonConfigOptions:
        s = self.settings
        instances, threads = s.instance_count, s.ort_intra_op_threads
        if s.triton_form == "python":
            # Measured on CPU: one single-threaded onnxruntime per core keeps every core
            # busy, where one instance with a thread per core leaves them idle between ops.
            cores = os.cpu_count() or 1
            instances = instances or cores
            threads = threads or max(1, cores // instances)
        return TritonConfigOptions(
            form=s.triton_form,
            max_batch_size=s.max_batch_size,
            sub_batch_size=s.sub_batch_size,
            max_queue_delay_microseconds=s.max_queue_delay_us,
            max_queue_size=s.triton_max_queue_size,
            instance_count=instances or 1,
            instance_kind=(
                s.instance_kind
                if s.instance_kind != "auto"
                else ("gpu" if s.triton_form == "onnxruntime" else "cpu")
            ),
            intra_op_threads=threads,
        )

    def _check_source(self, model_path: str | None, trust_remote_code: bool) -> str | None:
        """A request's model_path and trust_remote_code, checked against the settings."""
        if trust_remote_code and not self.settings.allow_trust_remote_code:
            raise Forbidden("trust_remote_code is disabled on this server")
        if model_path is None:
            return None
        path = Path(model_path)
        if not path.is_absolute():
            raise BadRequest("model_path must be an absolute path")
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
            metadata = self.read_metadata(triton_name)
            converted = False
            if metadata is None:
                if (self.repository / triton_name).exists():
                    raise ModelConflict(
                        f"repository entry '{triton_name}' exists but is not an embedgate model"
                    )
                spec = ConversionSpec(
                    model_name=name,
                    model_path=model_path,
                    triton_name=triton_name,
                    repository=str(self.repository.resolve()),
                    triton=self._triton_options(),
                    parity_threshold=self.settings.parity_threshold,
                    allow_network=self.settings.allow_hub_download,
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
            state, metadata = find_on_disk(self.repository, self.read_metadata, triton_name, model_name, pretrained)
            if state is OnDisk.CONFLICT:
                raise ModelConflict(
                    f"repository entries {' and '.join(clip_part_names(triton_name))} hold another model"
                )
            converted = False
            if metadata is None:
                config_dir = self.settings.clip_model_config_dir
                spec = ConversionSpec(
                    kind="clip",
                    model_name=model_name,
                    pretrained=pretrained,
                    clip_model_config_dir=str(config_dir.resolve()) if config_dir else None,
                    triton_name=triton_name,
                    repository=str(self.repository.resolve()),
                    triton=self._triton_options(),
                    parity_threshold=self.settings.parity_threshold,
                    allow_network=self.settings.allow_hub_download,
                    replace=state is OnDisk.HALF_PUBLISHED,
                )
                metadata = await self._convert(spec, progress, clip_part_names(triton_name))
                converted = True
            progress.step("loading into Triton")
            model = await self._activate(key, triton_name, metadata)
            progress.step("ready")
            await self._write_manifest()
            return LoadOutcome(model, already_loaded=False, converted=converted)

    async def restore(self, key: str) -> LoadOutcome:
        """Load a model named as in the manifest: a model name or a CLIP model's key."""
        clip = split_clip_key(key)
        return await (self.load_clip(*clip) if clip else self.load_sentence_transformer(key))

    async def _convert(self, spec: ConversionSpec, progress: Progress, staged: tuple[str, ...]) -> ModelMetadata:
        try:
            return await run_conversion(
                spec,
                timeout_s=self.settings.conversion_timeout_s,
                memory_limit_mb=self.settings.conversion_memory_limit_mb,
                on_line=progress.converter_line,
            )
        except BaseException:
            # A killed converter cannot clean up after itself.
            for triton_name in staged:
                await asyncio.to_thread(self._remove_staging, triton_name)
            raise

    async def _activate(self, name: str, triton_name: str, metadata: ModelMetadata) -> ServedModel:
        model = ServedModel(name, triton_name, metadata, await asyncio.to_thread(self._tokenizer, triton_name, metadata))
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

    def _tokenizer(self, triton_name: str, metadata: ModelMetadata) -> TextTokenizer | ClipTokenizer:
        if metadata.clip is not None:
            text_part = clip_part_names(triton_name)[0]
            return ClipTokenizer(self.repository / text_part / TOKENIZER_DIR / "tokenizer.json", metadata.clip.text)
        return TextTokenizer(
            self.repository / triton_name / TOKENIZER_DIR / "tokenizer.json",
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
                if self.read_metadata(triton_name) is None:
                    raise ModelNotFound(f"model '{name}' is not in the repository")
                parts: tuple[str, ...] = (triton_name,)
            else:
                state, _ = find_on_disk(self.repository, self.read_metadata, triton_name, name, pretrained)
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
                target = self.repository / part
                if not target.exists():
                    continue  # the missing half of an interrupted CLIP publish
                # Move aside first (atomic), so a half-deleted model is never visible.
                trash = self.repository / STAGING_DIR / f"deleted-{part}-{uuid.uuid4().hex[:8]}"
                trash.parent.mkdir(parents=True, exist_ok=True)
                os.rename(target, trash)
                await asyncio.to_thread(shutil.rmtree, trash, True)
            log.info("model %s deleted from the repository", key)

    def _remove_staging(self, triton_name: str) -> None:
        staging = self.repository / STAGING_DIR
        # Exactly this model's directories (<name>-<12 hex>), not those of "<name>-other".
        own = re.compile(rf"{re.escape(triton_name)}-[0-9a-f]{{12}}")
        for leftover in staging.glob(f"{glob.escape(triton_name)}-*"):
            if own.fullmatch(leftover.name):
                shutil.rmtree(leftover, ignore_errors=True)
        try:
            staging.rmdir()
        except OSError:
            pass  # not empty: something else is staging there

    async def reload_all(self) -> None:
        """After a Triton restart: load again every model that was loaded."""
        for model in list(self._served.values()):
            async with self._locks[model.triton_name]:
                try:
                    for part in model.triton_names:
                        await self.client.load(part)
                    log.info("reloaded %s after triton restart", model.name)
                except ApiError as exc:
                    log.error("could not reload %s: %s", model.name, exc.message)

    # --- manifest: the models to bring back when the gateway restarts
    def manifest(self) -> list[str]:
        try:
            names = json.loads((self.repository / MANIFEST_FILE).read_text())
        except (OSError, ValueError):
            return []
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    async def _write_manifest(self) -> None:
        path = self.repository / MANIFEST_FILE
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:6]}.tmp")
        self.repository.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(sorted(self._served)))
        os.replace(tmp, path)


class _Admission:
    __slots__ = ("_model",)

    def __init__(self, model: ServedModel):
        self._model = model

    def __enter__(self) -> None:
        self._model.inflight += 1

    def __exit__(self, *exc: object) -> None:
        self._model.inflight -= 1
