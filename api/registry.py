"""Which models exist in the repository, which are loaded in Triton, and how they get there.

The registry is the gateway's source of truth for "is this model loaded": inference
asks it (an in-memory lookup) instead of asking Triton on every request. Loads, unloads
and deletes of one model are serialized by a per-model lock, so concurrent loads of one
model convert it once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
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
)

from .conversion import run_conversion
from .errors import ApiError, ModelNotFound, ModelNotLoaded, Overloaded
from .names import from_triton_name, is_triton_name, to_triton_name
from .preprocess.text import TextTokenizer
from .settings import Settings
from .triton.client import TritonClient

log = logging.getLogger("embedgate.registry")

MANIFEST_FILE = ".embedgate-loaded.json"
STAGING_DIR = ".staging"


class ModelConflict(ApiError):
    status, code = 409, "model_conflict"


@dataclass
class ServedModel:
    name: str
    triton_name: str
    metadata: ModelMetadata
    tokenizer: TextTokenizer
    inflight: int = field(default=0)


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
    def served(self, name: str) -> ServedModel:
        model = self._served.get(name)
        if model is not None:
            return model
        triton_name = to_triton_name(name)
        if self.read_metadata(triton_name) is None:
            raise ModelNotFound(f"model '{name}' is not in the repository; load it first")
        raise ModelNotLoaded(f"model '{name}' is in the repository but not loaded")

    def loaded(self) -> list[ServedModel]:
        return list(self._served.values())

    def by_triton_name(self, triton_name: str) -> ServedModel | None:
        return self._served.get(from_triton_name(triton_name))

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
                if metadata is not None:
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
        return TritonConfigOptions(
            form=s.triton_form,
            max_batch_size=s.max_batch_size,
            max_queue_delay_microseconds=s.max_queue_delay_us,
            max_queue_size=s.triton_max_queue_size,
            instance_count=s.instance_count,
            instance_kind=(
                s.instance_kind
                if s.instance_kind != "auto"
                else ("gpu" if s.triton_form == "onnxruntime" else "cpu")
            ),
            intra_op_threads=s.ort_intra_op_threads,
        )

    async def load_sentence_transformer(self, name: str, model_path: str | None = None) -> LoadOutcome:
        triton_name = to_triton_name(name)
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
                )
                metadata = await run_conversion(spec, timeout_s=self.settings.conversion_timeout_s)
                converted = True
            model = await self._activate(name, triton_name, metadata)
            await self._write_manifest()
            return LoadOutcome(model, already_loaded=False, converted=converted)

    async def _activate(self, name: str, triton_name: str, metadata: ModelMetadata) -> ServedModel:
        tokenizer = await asyncio.to_thread(
            TextTokenizer,
            self.repository / triton_name / TOKENIZER_DIR / "tokenizer.json",
            metadata.max_seq_length,
            metadata.strip_whitespace,
        )
        await self.client.load(triton_name)
        model = ServedModel(name, triton_name, metadata, tokenizer)
        self._served[name] = model
        log.info("model %s loaded (triton name %s)", name, triton_name)
        return model

    async def unload(self, name: str) -> None:
        triton_name = to_triton_name(name)
        async with self._locks[triton_name]:
            if name not in self._served:
                self.served(name)  # raises 404 or 409 with the right message
            self._served.pop(name)
            await self._write_manifest()
            await self.client.unload(triton_name)
            log.info("model %s unloaded", name)

    async def delete(self, name: str) -> None:
        triton_name = to_triton_name(name)
        async with self._locks[triton_name]:
            target = self.repository / triton_name
            if self.read_metadata(triton_name) is None:
                raise ModelNotFound(f"model '{name}' is not in the repository")
            if self._served.pop(name, None) is not None:
                await self._write_manifest()
                await self.client.unload(triton_name)
            # Move aside first (atomic), so a half-deleted model is never visible.
            trash = self.repository / STAGING_DIR / f"deleted-{triton_name}-{uuid.uuid4().hex[:8]}"
            trash.parent.mkdir(parents=True, exist_ok=True)
            os.rename(target, trash)
            await asyncio.to_thread(shutil.rmtree, trash, True)
            log.info("model %s deleted from the repository", name)

    async def reload_all(self) -> None:
        """After a Triton restart: load again every model that was loaded."""
        for model in list(self._served.values()):
            async with self._locks[model.triton_name]:
                try:
                    await self.client.load(model.triton_name)
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
