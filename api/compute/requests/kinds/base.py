"""The one interface every model kind is served behind (``api/compute/requests/kinds/<kind>.py``).

A kind says what its Triton models are, its routes (what a request's texts go through, by
task) and the step each runs in (``steps.py``: texts through one graph unless the kind
says otherwise), how their inputs become tensors, what it outputs (and, for the rest,
where to go instead), the plan it makes of a request (``asks.py``: which texts each route
runs, with which prompt, by which step, and how the outputs become the answer; chunks
where the request asks for them), and what the listings show of it (fields the listing
schema reads from the kinds). The embedding service, the registry and the routes ask the
kind; no other code branches on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from embedgate.contract.preprocess.text import TextTokenizer, TokenBatch, bucket_length
from embedgate.contract.spec import (
    ATTENTION_MASK,
    EMBEDDING,
    INPUT_IDS,
    ROUTES_DIR,
    TOKENIZER_DIR,
    ModelMetadata,
    RouteInfo,
)

from ....errors import InvalidOption, WrongModelKind
from ..asks import ASKED_AT, Ask, Output, Plan, Served
from ..chunking import Chunking
from ..routes import EVERY_TASK, Route
from ..static import ComputedHere
from ..steps import TEXT_GRAPH

# part's Triton name -> its local directory (the repository's, or the gateway's cache of a remote one)
Files = Callable[[str], Path]
TOKENIZER_FILE = "tokenizer.json"


class ServedKind:
    """How the gateway serves one model of this kind."""

    name: ClassVar[str]
    # For messages: "a sentence-transformer (dense text embeddings)".
    title: ClassVar[str]
    outputs: ClassVar[frozenset[Output]]
    # What ``POST /infer`` gives for texts (None: it gives none).
    text_output: ClassVar[Output | None] = None
    # The text graph's output.
    output: ClassVar[str] = EMBEDDING
    # How its outputs are pooled, as TEI's /info names it ("model": inside its graph).
    pooling: ClassVar[str] = "model"
    # The listing's fields of this kind: name -> (type, pydantic FieldInfo), read by the schema.
    listing_fields: ClassVar[dict[str, tuple[Any, Any]]] = {}
    # What the metrics call each of its parts, in the order of ``parts``, where it has
    # several (``part`` in ``GET /metrics``; the schema lists every kind's).
    metric_parts: ClassVar[tuple[str, ...]] = ()

    def __init__(self, metadata: ModelMetadata):
        self.metadata = metadata
        # Each part's graph's inputs, where the conversion recorded them.
        self._reads = {part: frozenset(names) for part, names in (metadata.graph_inputs or {}).items()}

    def fed(self, part: str, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``tensors`` as ``part``'s graph reads them: an input it does not declare (a
        tokenizer's output the exported graph dropped) left out."""
        reads = self._reads.get(part)
        if reads is None or reads.issuperset(tensors):
            return tensors
        return {name: value for name, value in tensors.items() if name in reads}

    def parts(self, triton_name: str) -> tuple[str, ...]:
        """The repository's entries it is made of, each a Triton model where Triton runs
        any of it; the first holds the tokenizer."""
        return (triton_name,)

    def triton_parts(self, triton_name: str) -> tuple[str, ...]:
        """The Triton models it is made of: its parts, or none where the gateway computes
        every route (a static embedding model)."""
        return () if self.metadata.gateway_only else self.parts(triton_name)

    def part_labels(self, triton_name: str) -> dict[str, dict[str, str]]:
        """Where a model has several parts: each part's Triton name -> what the metrics call
        it (besides the model's name)."""
        parts = self.parts(triton_name)
        return {} if len(parts) < 2 else {part: {"part": label} for part, label in zip(parts, self.metric_parts)}

    def routes(self, files: Files, triton_name: str) -> list[Route]:
        """The model's routes, from its files: one per route of its Router (metadata.json's
        ``routes``), or one for every task. Blocking (it reads files)."""
        infos = self.metadata.routes
        if not infos:
            return [Route("", EVERY_TASK, self.tokenizer(files, triton_name), self.parts(triton_name)[0])]
        return [self._route(files, triton_name, index, info) for index, info in enumerate(infos)]

    def _route(self, files: Files, triton_name: str, index: int, info: RouteInfo) -> Route:
        directory = files(triton_name) if index == 0 else files(triton_name) / ROUTES_DIR / str(index)
        tokenizer = TextTokenizer(
            directory / TOKENIZER_DIR / TOKENIZER_FILE, info.max_seq_length, info.strip_whitespace,
            add_special_tokens=info.add_special_tokens,
        )
        if info.version is None:  # no graph: the gateway computes it
            return Route(info.name, tuple(info.tasks), tokenizer, triton_name, step=self.static_route(directory, info))
        return Route(info.name, tuple(info.tasks), tokenizer, triton_name, version=str(info.version), step=TEXT_GRAPH)

    def static_route(self, directory: Path, info: RouteInfo) -> ComputedHere:
        """A route the gateway computes itself, from the weights in ``directory``."""
        raise NotImplementedError(f"{self.name} computes no route in the gateway")

    def tokenizer(self, files: Files, triton_name: str):
        """The text tokenizer saved beside the model (a text per row)."""
        metadata = self.metadata
        return TextTokenizer(
            self.tokenizer_file(files, triton_name), metadata.max_seq_length, metadata.strip_whitespace
        )

    def text_inputs(self, batch: TokenBatch, rows: np.ndarray | slice, width: int) -> dict[str, np.ndarray]:
        """The text graph's tensors for ``rows`` of ``batch``, ``width`` tokens wide."""
        return {
            INPUT_IDS: np.ascontiguousarray(batch.input_ids[rows, :width]),
            ATTENTION_MASK: np.ascontiguousarray(batch.attention_mask[rows, :width]),
        }

    def rows(self, batch: TokenBatch, rows: np.ndarray | slice, outputs: np.ndarray) -> np.ndarray:
        """The graph's ``outputs`` for ``rows`` of ``batch`` as the model's rows (a row per input)."""
        return outputs

    def noop_output(self, tensors: dict[str, np.ndarray]) -> np.ndarray:
        """What a graph of the model would give for ``tensors``, as zeros (no model runs)."""
        rows = len(next(iter(tensors.values())))
        return np.zeros((rows, self.metadata.embedding_dim), dtype=np.float32)

    def fixed_width(self) -> int | None:
        """The one sequence length the text graph takes, where it takes only one."""
        return None

    def bucketed(self) -> bool:
        """Whether its texts are padded to a few widths (powers of two): the native form's
        graphs batch only requests of one shape."""
        return self.metadata.form == "onnxruntime"

    def call_width(self, longest: int, tokenizer: Any) -> int:
        """The width a call of texts whose longest has ``longest`` tokens is padded to."""
        fixed = self.fixed_width()
        if fixed is not None:
            return fixed
        return bucket_length(longest, tokenizer.max_length) if self.bucketed() else longest

    def gives(self) -> frozenset[Output]:
        """What this model gives (``outputs``, where it does not depend on the model)."""
        return self.outputs

    def joins_parts(self) -> bool:
        """Whether an input of several parts (a text and an image) is embedded together
        (``MessageInput``); where not, such an input is refused."""
        return False

    def main_output(self) -> Output:
        """What the model is for: what it gives for texts, else what it scores (a
        reranker's relevance before a classifier's labels)."""
        if self.text_output is not None:
            return self.text_output
        return Output.RERANK if Output.RERANK in self.gives() else Output.PREDICT

    def require(self, output: Output, model_name: str, elsewhere: Mapping[Output, str] = ASKED_AT) -> None:
        """Raises :class:`WrongModelKind` unless the model gives ``output``, saying where to
        go instead (in the API the request came through: ``elsewhere``)."""
        gives = self.gives()
        if output in gives:
            return
        offers = "; ".join(f"{o.value}: {elsewhere[o]}" for o in Output if o in gives)
        raise WrongModelKind(
            f"model '{model_name}' is {self.title} and gives no {output.value} (what it gives: {offers})"
        )

    def planned(self, model: Served, ask: Ask, elsewhere: Mapping[Output, str] = ASKED_AT) -> Plan:
        """What ``ask`` asks of ``model``: refused unless this kind gives it (saying where to
        go instead: ``elsewhere``, in the API the request came through), then planned, cut
        into chunks where it asks for them. Nothing runs yet."""
        self.require(ask.output, model.name, elsewhere)
        plan = self.plan(model, ask)
        return plan if ask.chunking is None else self.chunked(model, ask, plan)

    def plan(self, model: Served, ask: Ask) -> Plan:
        """Which texts each route runs and how the outputs become the answer (``ask.output``
        is one this kind gives; its options are checked here, before anything runs)."""
        raise NotImplementedError(f"{self.name} plans no {ask.output.value}")

    def chunked(self, model: Served, ask: Ask, plan: Plan) -> Plan:
        """``plan`` of ``ask``'s chunks: dense embeddings of texts through one route with a
        text tokenizer, each text cut into chunks and the chunks run instead (the service
        cuts them, ``compute/document_chunks.py``), or late chunks (:meth:`late`); else refused."""
        chunking = ask.chunking
        assert chunking is not None
        if ask.output is not Output.EMBED or len(plan.runs) != 1 or not isinstance(plan.runs[0].route.tokenizer, TextTokenizer):
            raise InvalidOption(
                f"chunking is for dense embeddings of texts; model '{model.name}' is {self.title}", "chunking"
            )
        if chunking.late:
            return self.late(model, plan, chunking)
        return dataclasses.replace(plan, chunking=chunking)

    def late(self, model: Served, plan: Plan, chunking: Chunking) -> Plan:
        """``plan``'s texts as late chunks (``late_chunking.py``), pooled in the context of
        the whole text by the model's late-chunking graph; refused (InvalidOption) where it
        has none, saying why."""
        raise InvalidOption(
            f"late chunking pools a sentence-transformer's token vectors by its mean pooling; model '{model.name}' "
            f"is {self.title}",
            "chunking",
        )

    def converted_without_late_chunking(self) -> bool:
        """Whether a server that publishes late-chunking graphs would convert this model
        again for one (a sentence-transformer converted before it did)."""
        return False

    def labels(self) -> list[str]:
        """Each output value's name, where it scores labels (a classifier's)."""
        return [f"LABEL_{index}" for index in range(self.metadata.embedding_dim)]

    def listing(self) -> dict[str, Any]:
        """Fields of this kind in the model listings (declared in ``listing_fields``)."""
        return {}

    @staticmethod
    def tokenizer_file(files: Files, part: str) -> Path:
        return files(part) / TOKENIZER_DIR / TOKENIZER_FILE
