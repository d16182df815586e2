"""A sentence-transformer: dense text embeddings (``SentenceTransformer.encode``), per route
where its modules differ by task (``encode_query``, ``encode_document``).

A static embedding model's routes are computed by the gateway from the stored vectors
(``requests/static.py``), with no Triton model. Where the model's Pooling leaves a prompt's
tokens out (``include_prompt=False``), a prompted text keeps its prompt apart
(``PromptedText``) until its route's tokenizer marks the prompt's tokens for the graph.

Late chunks run in a step of their own (:class:`LateChunks`): a text's rows through the
model's late-chunking graph, a Triton model beside its own (``<name>---late``), each chunk
pooled from its row.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from embedgate.contract.kinds.dense import KIND, DenseInfo, PromptExclusion, late_part_name
from embedgate.contract.preprocess.prompted import PromptedText, PromptMarkingTokenizer
from embedgate.contract.spec import CHUNK_EMBEDDINGS, CHUNK_STARTED, STATIC_WEIGHTS_FILE, RouteInfo

from ....errors import EmbedgateError, InvalidOption, WrongModelKind
from ..asks import Ask, Output, Plan, Run, Served, joined, text_run
from ..chunking import Chunking, chunk_source
from ..costs import MIN_READ_COST, items_cost
from ..late_chunking import LateLayout, batches, late_layout
from ..quantize import CALIBRATED, Precision, available, quantized
from ..results import Embeddings
from ..static import MeanVectors
from ..steps import Engine, Model, RouteParts, Step, Tensors
from .base import Files, ServedKind

PRECISIONS_FIELD = (
    list[str] | None,
    Field(
        None,
        description="Dense embeddings: the precisions they come in (int8 and uint8 need ranges calibrated at "
        "conversion; models converted before they were recorded lack them).",
    ),
)


class DenseKind(ServedKind):
    name = KIND.name
    title = "a sentence-transformer (dense text embeddings)"
    outputs = frozenset({Output.EMBED})
    text_output = Output.EMBED
    # Where it has its late-chunking graph beside its own.
    metric_parts = ("model", "late_chunking")
    listing_fields = {
        "precisions": PRECISIONS_FIELD,
        "late_chunking": (
            bool | None,
            Field(None, description="Dense embeddings: whether requests may ask for late chunks (the model's "
                  "late-chunking graph is loaded beside it)."),
        ),
        "late_chunking_refusal": (
            str | None,
            Field(None, description="Why the model has no late-chunking graph, where it was converted with "
                  "EMBEDGATE_LATE_CHUNKING (its pooling is not a mean, ...)."),
        ),
    }

    def parts(self, triton_name: str) -> tuple[str, ...]:
        """The model's graph, and its late-chunking graph where it has one."""
        return (triton_name, late_part_name(triton_name)) if self._record.late_chunking is not None else (triton_name,)

    def late(self, model: Served, plan: Plan, chunking: Chunking) -> Plan:
        """Its one run's texts through the late-chunking graph (:class:`LateChunks`), the
        answer made by the same plan, with each text's chunks."""
        (run,) = plan.runs
        step = LateChunks(self.late_part(model.name, model.triton_name), chunking)

        def finish(results: list[Embeddings]) -> Embeddings:
            return dataclasses.replace(plan.finish(results), chunks=results[0].chunks)

        return Plan([Run(run.route, run.inputs, run.prefix, own_step=step)], finish)

    def late_part(self, model_name: str, triton_name: str) -> str:
        """The Triton model that pools a text's late chunks; refused (InvalidOption) where the
        model has none, saying why."""
        dense = self._record
        if dense.late_chunking is not None:
            return late_part_name(triton_name)
        variant = self.metadata.variant
        if variant is not None:
            raise InvalidOption(
                f"model '{model_name}' is the '@{variant.name}' variant: late chunking runs the model's own float32 "
                "graph; ask the model itself",
                "chunking",
            )
        if dense.late_chunking_refusal is not None:
            why = dense.late_chunking_refusal
            raise InvalidOption(f"model '{model_name}' has no late chunking: {why[0].lower() + why[1:]}", "chunking")
        raise InvalidOption(
            f"model '{model_name}' was converted without its late-chunking graph: the server publishes them with "
            "EMBEDGATE_LATE_CHUNKING=true, and converts a model again when it is next loaded",
            "chunking",
        )

    def noop_output(self, tensors: dict[str, np.ndarray]) -> np.ndarray:
        started = tensors.get(CHUNK_STARTED)
        if started is None:
            return super().noop_output(tensors)
        return np.zeros((len(started), int(started.max()), self.metadata.embedding_dim), dtype=np.float32)

    def static_route(self, directory: Path, info: RouteInfo) -> MeanVectors:
        # Mapped, not read: a large vocabulary's vectors are one copy in the page cache for
        # every gateway worker, and only the rows texts use are ever read from disk. A plain
        # array over the mapping: np.memmap's indexing costs more per gather.
        vectors = np.asarray(np.load(directory / STATIC_WEIGHTS_FILE, mmap_mode="r"))
        return MeanVectors(vectors, normalize=info.normalized)

    def tokenizer(self, files: Files, triton_name: str):
        exclusion = self._prompt_exclusion()
        if exclusion is None:
            return super().tokenizer(files, triton_name)
        metadata = self.metadata
        return PromptMarkingTokenizer(
            self.tokenizer_file(files, triton_name), metadata.max_seq_length, metadata.strip_whitespace,
            special_ids=exclusion.special_ids,
        )

    def plan(self, model: Served, ask: Ask) -> Plan:
        return dense_plan(model, ask, prompt_apart=self._prompt_exclusion() is not None)

    def listing(self) -> dict[str, Any]:
        return {
            "precisions": list(available(self.metadata.calibration)),
            "late_chunking": self._record.late_chunking is not None,
            "late_chunking_refusal": self._record.late_chunking_refusal,
        }

    def converted_without_late_chunking(self) -> bool:
        # Neither the graph nor why it has none: converted before the server published them.
        dense = self._record
        return self.metadata.variant is None and dense.late_chunking is None and dense.late_chunking_refusal is None

    @property
    def _record(self) -> DenseInfo:
        """Its record (an empty one for a model converted before it had any to keep)."""
        return self.metadata.record_of(DenseInfo) or DenseInfo()

    def _prompt_exclusion(self) -> PromptExclusion | None:
        return self._record.prompt_exclusion


class LateChunks(Step):
    """A request's late chunks (``late_chunking.py``): its texts laid out as rows in the pool
    (the request charged for the tokens they run: windows overlap), the rows through the
    late-chunking graph in calls of at most the model's batch size, each chunk's vector from
    its row's. A request's calls are its own; in a batch job, so is its refusal."""

    own_errors = (EmbedgateError,)
    min_read = MIN_READ_COST

    def __init__(self, part: str, chunking: Chunking):
        self.part = part
        self.chunking = chunking

    def triton_part(self, route: RouteParts) -> str | None:
        return self.part

    def cost(self, inputs: Sequence[Any]) -> float:
        return items_cost(inputs)

    async def run(
        self, engine: Engine, model: Model, route: RouteParts, inputs: list, prefix: str, timeout_s: float
    ) -> Embeddings:
        began = time.perf_counter()
        texts, prefix, _ = chunk_source(inputs, prefix)
        metadata = model.metadata
        layout, calls = await engine.in_pool(
            _laid_out, route.tokenizer, texts, self.chunking, prefix, metadata.max_seq_length, engine.max_chunks,
            metadata.max_batch_size,
        )
        # Charged for its texts when it came in; its rows' tokens (windows overlap): charged now.
        engine.charge_more(layout.tokens - items_cost(texts))

        def send(tensors: Tensors) -> Awaitable[np.ndarray]:
            return engine.infer(model, self.part, tensors, CHUNK_EMBEDDINGS, timeout_s=timeout_s)

        outputs: list[np.ndarray] = [np.empty(0)] * len(layout.rows)
        sent = time.perf_counter()
        for (rows, _), output in zip(calls, await engine.bounded(send, [tensors for _, tensors in calls])):
            for row, values in zip(rows, output):
                outputs[row] = values
        # Its usage counts each row's tokens once.
        return Embeddings(
            layout.gather(outputs), layout.row_tokens(), 0, tokenize_ms=(sent - began) * 1000,
            inference_ms=(time.perf_counter() - sent) * 1000, chunks=layout.chunks,
        )


def _laid_out(
    tokenizer, texts: list[str], chunking: Chunking, prefix: str, max_length: int, max_chunks: int, max_rows: int
) -> tuple[LateLayout, list[tuple[list[int], Tensors]]]:
    """The texts' rows and their calls (in the pool: tokenizing, cutting and the inputs alike)."""
    layout = late_layout(tokenizer, texts, chunking, prefix, max_length, max_chunks)
    return layout, batches(layout, max_rows)


def dense_plan(model: Served, ask: Ask, *, prompt_apart: bool = False) -> Plan:
    """Texts through the route their task takes, then unit length, the dimensions and the
    precision asked for (a sentence-transformer's, a CLIP model's text tower's).
    ``prompt_apart``: the model pools a text without its prompt's tokens, so each text keeps
    its prompt apart, to be marked when it is tokenized."""
    options = ask.options
    if options.top_k is not None:
        raise WrongModelKind("top_k is for sparse encoders")
    dimensions = options.dimensions
    shortened = False
    if dimensions is not None:
        full = model.metadata.embedding_dim
        if dimensions > full:
            raise InvalidOption(f"dimensions must be at most {full} for model '{model.name}'", "dimensions")
        shortened = dimensions < full
    if shortened and options.precision in CALIBRATED:
        raise InvalidOption(
            f"dimensions with {options.precision}: its ranges are calibrated on the model's full vectors", "dimensions"
        )
    run = text_run(model, ask.inputs, ask.prompt)
    if prompt_apart and run.prefix:
        run = Run(run.route, [PromptedText(run.prefix, text) for text in run.inputs])

    def finish(results):
        vectors = dense(
            model, results[0].vectors, normalize=options.normalize, precision=options.precision,
            dimensions=dimensions if shortened else None,
        )
        return joined(results, vectors)

    return Plan([run], finish)


def dense(
    model: Served, vectors: np.ndarray, *, normalize: bool, precision: Precision, dimensions: int | None = None
) -> np.ndarray:
    """A model's dense output as a request asks for it: unit length where asked (a model
    ending in Normalize already is), its first ``dimensions`` (unit length again where
    asked), then in ``precision`` with the model's ranges."""
    if normalize and not model.metadata.normalized:
        vectors = unit_rows(vectors)
    unit = normalize or model.metadata.normalized
    if dimensions is not None:
        vectors = np.ascontiguousarray(vectors[:, :dimensions], dtype=np.float32)
        unit = normalize
        if normalize:
            vectors = unit_rows(vectors)
    return quantized(vectors, precision, model.metadata.calibration, normalized=unit, what="its embeddings")


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
