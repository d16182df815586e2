"""A loaded model as the compute path sees it: its Triton models, metadata, kind, routes and
tokenizer."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from embedgate.contract.preprocess.clip_text import AnyClipTokenizer
from embedgate.contract.preprocess.text import TextTokenizer
from embedgate.contract.spec import ModelMetadata

from .kinds import ServedKind, kind_of
from .routes import EVERY_TASK, Route

_serials = itertools.count(1)


@dataclass
class ServedModel:
    # The registry's key: the model name, or "model_name:pretrained" for a CLIP model.
    name: str
    triton_name: str
    metadata: ModelMetadata
    # The default route's tokenizer.
    tokenizer: TextTokenizer | AnyClipTokenizer
    # What its texts go through, by task (``routes.py``); None: one route, with ``tokenizer``.
    routes: list[Route] | None = None
    # Requests holding an admission slot (compute/scheduling/admission.py), and of those, each key's
    # (by its keyed hash; only keys with some in flight).
    inflight: int = field(default=0)
    by_key: dict[str, int] = field(default_factory=dict, init=False)
    kind: ServedKind = field(init=False)
    # New at every load: the response cache's rows of one load are never another's.
    serial: int = field(init=False, default_factory=lambda: next(_serials))
    # Inputs answered from the response cache, and those that were not.
    cache_hits: int = field(default=0, init=False)
    cache_misses: int = field(default=0, init=False)
    # When a request or a bulk job's call last used it (monotonic), and the bulk job's calls
    # running now: an idle model is the least recently used one the memory budget unloads.
    last_used: float = field(init=False, default_factory=time.monotonic)
    bulk_calls: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.kind = kind_of(self.metadata)
        if self.routes is None:
            self.routes = [Route("", EVERY_TASK, self.tokenizer, self.kind.parts(self.triton_name)[0])]

    @property
    def triton_names(self) -> tuple[str, ...]:
        """The Triton models it is made of (a CLIP model: its text and image towers; a
        static embedding model, computed by the gateway: none)."""
        return self.kind.triton_parts(self.triton_name)
