"""What a load answers, and what the management routes call: the registry itself on one
machine, or a cluster's view (Ray Serve's desired state, a gateway worker's primary)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..compute.requests.served import ServedModel


@dataclass(frozen=True)
class LoadOutcome:
    model: ServedModel
    already_loaded: bool
    converted: bool


class ModelControl(Protocol):
    """What the management routes call (and the embedding service, to load again a model
    whose process died). A load's ``options``: ``progress``, ``on_source_change`` (what it
    does when the repository's copy was made from another source: ``source_change.py``),
    ``revision`` (the hub's branch, tag or commit of a model from the hub), and for a
    sentence-transformer ``trust_remote_code``."""

    async def load_sentence_transformer(self, name: str, model_path: str | None = None, **options: Any) -> LoadOutcome: ...

    async def load_clip(self, model_name: str, pretrained: str, **options: Any) -> LoadOutcome: ...

    async def unload(self, name: str, pretrained: str | None = None) -> None: ...

    async def delete(self, name: str, pretrained: str | None = None) -> None: ...

    async def reload_lost(self, key: str, part: str, sent_at: float) -> None: ...
