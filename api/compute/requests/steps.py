"""How a route's inputs become its outputs: the steps a model's kind hands the embedding
service.

Each route has a step (``Route.step``), chosen by the kind that made the route, and a run
may bring one of its own (a dense model's late chunks, ``kinds/dense.py``). The common ones
are here: texts through one graph (:class:`TextGraph`: the route's Triton model at its
version) and images through an image graph (:class:`ImageGraph`); a route the gateway
computes itself from stored weights is ``static.py``'s; a kind that runs in several steps
brings its own, in its module (a vision-language model's images: the vision graph per
image, then the language graph, ``kinds/vision_language.py``).

The service runs every step the same way (``compute/dispatch.py``): the response cache
where the step's outputs are kept, admission by cost, the route's coalescer where requests'
inputs share calls (its bulk lane for a batch job's), then the step's own work, which asks
the compute side (:class:`Engine`) for the tokenizer pool, the image threads and the
backend. No step does I/O itself, and none schedules.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from embedgate.contract.preprocess.text import TokenBatch

from ...errors import InvalidImage
from .costs import MIN_READ_COST, items_cost
from .results import Embedded, Embeddings

T = TypeVar("T")
# A Triton model's input tensors, by name.
Tensors = dict[str, np.ndarray]
# A loaded model (``served.ServedModel``): its metadata, its kind (its tensors), its name.
Model = Any


class Engine(Protocol):
    """What a step may ask of the compute side (``compute/engine.py``)."""

    # The most chunks a request's texts may make (EMBEDGATE_MAX_CHUNKS_PER_REQUEST).
    max_chunks: int

    def in_pool(self, work: Callable[..., T], *args: Any) -> Awaitable[T]:
        """``work(*args)`` in the tokenizer pool, off the event loop."""
        ...

    def infer(
        self, model: Model, part: str, tensors: Tensors, output: str, *, timeout_s: float, version: str = ""
    ) -> Awaitable[np.ndarray]:
        """One call of ``model``'s Triton model ``part`` (at ``version``): its ``output``."""
        ...

    def bounded(self, send: Callable[[Any], Awaitable[np.ndarray]], parts: list) -> Awaitable[list[np.ndarray]]:
        """Each part sent, a bounded number at a time; their outputs in order."""
        ...

    def load_images(self, sources: Sequence[str | bytes], preparation: Any) -> Awaitable[np.ndarray]:
        """Images fetched and decoded in the image threads, prepared (InvalidImage if one cannot be)."""
        ...

    def load_patches(self, sources: Sequence[str | bytes], spec: Any) -> Awaitable[list[tuple[np.ndarray, Any]]]:
        """Each image's patches and grid, for a vision-language model (InvalidImage if one cannot be)."""
        ...

    def charge_more(self, tokens: float) -> None:
        """The request in progress charged for ``tokens`` more than it brought (its key's limits)."""
        ...


class RouteParts(Protocol):
    """What a step reads of its route (``routes.Route``)."""

    tokenizer: Any
    part: str
    version: str


class Step:
    """How inputs become outputs; the service reads what it declares here."""

    # An image route's (``routes.route_for(..., images=True)``).
    takes_images: ClassVar[bool] = False
    # Its outputs are kept in the response cache, by route and input.
    cached: ClassVar[bool] = False
    # Online requests' inputs share calls through the route's coalescer (:meth:`sender`),
    # and a batch job's through its bulk lane.
    coalesced: ClassVar[bool] = False
    # A batch job's lines' inputs go in one call, their prompts in their texts; else each
    # line's run is a call of its own, its prompt beside its inputs.
    joined: ClassVar[bool] = False
    # A line's own call failing with one of these is that line's outcome, not its chunk's.
    own_errors: ClassVar[tuple[type[Exception], ...]] = ()
    # Work of less cost is not read for the model's speed (``scheduling/backlog.py``).
    min_read: ClassVar[float] = 0.0

    def triton_part(self, route: RouteParts) -> str | None:
        """The Triton model its work is admitted for; None: the gateway's own work."""
        return route.part

    def cost(self, inputs: Sequence[Any]) -> float:
        """What ``inputs`` cost, in the units admission counts (an image: one)."""
        return float(len(inputs))

    def sender(self, engine: Engine, model: Model, route: RouteParts) -> Any:
        """What the route's coalescer sends its calls to (a coalesced step's)."""
        raise NotImplementedError(f"{type(self).__name__} shares no calls")

    async def run(
        self, engine: Engine, model: Model, route: RouteParts, inputs: list, prefix: str, timeout_s: float
    ) -> Embeddings:
        """``inputs`` (with ``prefix``, the prompt) through this step as one request's."""
        raise NotImplementedError


def prefixed(prefix: str, inputs: list) -> list:
    """Each text with ``prefix`` before it (a pair's prompt is already in its first text:
    the kind's plan puts it there)."""
    return [prefix + text for text in inputs] if prefix else inputs


def began_then(work: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Runs ``work`` and says when it began (in a pool: the wait before it is queue time)."""
    return time.perf_counter(), work(*args)


class TextGraph(Step):
    """Texts (or pairs) through one graph, the route's Triton model at its version:
    tokenized in the pool, sent in calls of at most the model's batch size (a larger request
    sorted by length first, so each call pads little), a row per text back. Online requests'
    texts share calls through the route's coalescer; the outputs are kept in the response
    cache."""

    cached = coalesced = joined = True
    min_read = MIN_READ_COST

    def cost(self, inputs: Sequence[Any]) -> float:
        return items_cost(inputs)

    def sender(self, engine: Engine, model: Model, route: RouteParts) -> GraphCalls:
        return GraphCalls(self, engine, model, route)

    async def run(
        self, engine: Engine, model: Model, route: RouteParts, inputs: list, prefix: str, timeout_s: float
    ) -> Embeddings:
        arrived = time.perf_counter()
        embedded = await self.embed(engine, model, route, inputs, timeout_s, prefix)
        return embedded.share(slice(None), arrived)

    async def embed(
        self, engine: Engine, model: Model, route: RouteParts, inputs: list, timeout_s: float, prefix: str = ""
    ) -> Embedded:
        """One pass over ``inputs``: tokenized in the pool, then through the graph."""
        tokenize_began, batch = await engine.in_pool(began_then, _tokenized, model, route, inputs, prefix)
        tokenized = time.perf_counter()
        limit = model.metadata.max_batch_size
        if len(inputs) <= limit:
            vectors = await _sent(engine, model, route, batch, slice(None), batch.input_ids.shape[1], timeout_s)
        else:
            vectors = await _in_slices(engine, model, route, batch, limit, timeout_s)
        return Embedded(batch, vectors, tokenize_began, tokenized, time.perf_counter())


class GraphCalls:
    """One route's calls, as its coalescer sends them: several requests' texts (their
    prompts in them) through the route's graph, and each request's share of the answer."""

    __slots__ = ("_step", "_engine", "_model", "_route")

    share = staticmethod(Embedded.share)

    def __init__(self, step: TextGraph, engine: Engine, model: Model, route: RouteParts):
        self._step, self._engine, self._model, self._route = step, engine, model, route

    def send(self, items: list, timeout_s: float) -> Awaitable[Embedded]:
        return self._step.embed(self._engine, self._model, self._route, items, timeout_s)


def _tokenized(model: Model, route: RouteParts, inputs: list, prefix: str) -> TokenBatch:
    return route.tokenizer.encode(prefixed(prefix, inputs), model.kind.bucketed())


async def _in_slices(
    engine: Engine, model: Model, route: RouteParts, batch: TokenBatch, limit: int, timeout_s: float
) -> np.ndarray:
    # Sorted by length so each slice pads little, sent side by side (Triton batches them),
    # the rows put back in the request's order.
    counts = np.asarray(batch.token_counts)
    order = np.argsort(counts, kind="stable")
    kind, tokenizer = model.kind, route.tokenizer

    def send(rows: np.ndarray) -> Awaitable[np.ndarray]:
        width = kind.call_width(int(counts[rows].max()), tokenizer)
        return _sent(engine, model, route, batch, rows, width, timeout_s)

    slices = [order[start : start + limit] for start in range(0, len(order), limit)]
    sorted_vectors = np.concatenate(await engine.bounded(send, slices))
    vectors = np.empty_like(sorted_vectors)
    vectors[order] = sorted_vectors
    return vectors


async def _sent(
    engine: Engine, model: Model, route: RouteParts, batch: TokenBatch, rows: np.ndarray | slice, width: int,
    timeout_s: float,
) -> np.ndarray:
    """``rows`` of ``batch`` through the route's graph: a row per text."""
    kind = model.kind
    tensors = kind.text_inputs(batch, rows, width)
    outputs = await engine.infer(model, route.part, tensors, kind.output, timeout_s=timeout_s, version=route.version)
    return kind.rows(batch, rows, outputs)


class ImageGraph(Step):
    """Images (URLs, data URIs or bytes) through an image graph: fetched and decoded in the
    image threads, prepared as the model's preprocessing says (``preparation``), then sent
    in slices (one per CPU instance at least: the model runs each on one core). An image
    that cannot be used is its request's error."""

    takes_images = True
    own_errors = (InvalidImage,)

    def __init__(self, preparation: Any):
        self.preparation = preparation

    async def run(
        self, engine: Engine, model: Model, route: RouteParts, images: list, prefix: str, timeout_s: float
    ) -> Embeddings:
        started = time.perf_counter()
        pixels = await engine.load_images(images, self.preparation)
        loaded = time.perf_counter()
        kind, metadata = model.kind, model.metadata

        def send(part: np.ndarray) -> Awaitable[np.ndarray]:
            return engine.infer(model, route.part, kind.image_inputs(part), kind.output, timeout_s=timeout_s)

        parts = -(-len(pixels) // metadata.max_batch_size)
        if metadata.gpu is None:
            parts = max(parts, min(metadata.instance_count, len(pixels)))
        size = -(-len(pixels) // parts)
        vectors = np.concatenate(
            await engine.bounded(send, [pixels[start : start + size] for start in range(0, len(pixels), size)])
        )
        # Preparing images is what tokenizing is to texts.
        return Embeddings(vectors, [0] * len(images), 0, tokenize_ms=(loaded - started) * 1000,
                          inference_ms=(time.perf_counter() - loaded) * 1000)


# The step of every route of texts through one graph (it keeps nothing of its own).
TEXT_GRAPH = TextGraph()
