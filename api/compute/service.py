"""Texts, pairs or images in, embeddings or scores out: what a request asks of a model
(``requests/asks.py``), its kind's plan, tokenize or decode off the loop, the backend,
then the plan's post-processing.

This is the narrow interface between the endpoints and the compute side. Endpoints call
:meth:`EmbeddingService.answer` (and :meth:`~EmbeddingService.answer_bulk` for a batch
job's lines, in the bulk lane) inside their envelope, which holds the request's one
admission slot: the model's kind checks it gives what is asked and plans it (the route
each input takes by its task, with the prompt the request chose, ``requests/prompts.py``),
every run goes the same way, and the plan makes the answer. Endpoints never see tensors or
the backend. Every text input, a pair included, takes the same path: merged with other
requests' by its route's coalescer, or tokenized in the pool and sent in length-sorted
slices (Triton calls); a route computed by the gateway (static weights) is tokenized and computed in the
pool, with no backend call; a route of images (a CLIP model's image tower) is fetched and
decoded in the image threads and sent in slices (a vision-language model's, in two steps:
``message_images.py``).

(A request's own chunks, long texts cut for ``chunking``, are inputs like any other; late
chunks are rows of the model's late-chunking graph: ``document_chunks.py``.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from embedgate.contract.kinds.vision_language import PatchImages
from embedgate.contract.preprocess.text import TokenBatch, bucket_length
from embedgate.contract.spec import CHUNK_EMBEDDINGS

from ..errors import DeadlineExceeded
from ..settings import Settings
from .backend.base import Backend
from .cache import ResponseCache, answer_from_cache
from .bulk_lane import BulkLane, text_length
from .document_chunks import chunked_plan, expanded, laid_out, late_answer
from .images.loader import ImageLoader
from .message_images import MessageImages
from .requests.asks import ENDPOINTS, Ask, Output, Plan, TextInput, prefixed
from .requests.results import Embedded, Embeddings
from .requests.routes import Route
from .requests.served import ServedModel
from .scheduling import spreading
from .scheduling.admission import admit
from .scheduling.backlog import Backlogs
from .scheduling.batching import BatchingPolicy
from .scheduling.coalescing import Coalescer
from .scheduling.concurrency import run_all
from .requests.costs import MIN_READ_COST, items_cost
from .scheduling.cost_admission import CostAdmission
from .scheduling.pacing import Pace
from .scheduling.rates import KeyRates, Standing
from .scheduling.threads import OffLoopThreads
from .tokens import Tokens

log = logging.getLogger("embedgate.embedding")
T = TypeVar("T")


def _began_then(work: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Runs ``work`` and says when it began (in a pool: the wait before it is queue time)."""
    return time.perf_counter(), work(*args)


def _tokenize(model: ServedModel, route: Route, inputs: list[TextInput], prefix: str) -> TokenBatch:
    return route.tokenizer.encode(prefixed(prefix, inputs), model.metadata.form == "onnxruntime")


def _static(route: Route, inputs: list[TextInput], prefix: str) -> tuple[TokenBatch, np.ndarray]:
    batch = route.tokenizer.encode(prefixed(prefix, inputs))
    assert route.static is not None
    return batch, route.static.vectors(batch.input_ids, batch.attention_mask)


class EmbeddingService(BulkLane, MessageImages):
    def __init__(self, settings: Settings, backend: Backend):
        self.settings = settings
        self.batching = BatchingPolicy(settings)
        self.backend = backend
        self._pool = OffLoopThreads(settings.tokenizer_threads, "tokenize")
        # Tokenizing in full and decoding (TEI's /tokenize, /decode), in the same pool.
        self.tokens = Tokens(self._pool)
        self.images = ImageLoader(settings)
        # Each route of each loaded model has its own: a route's texts never share a call
        # with another's (they go through other modules, or are tokenized otherwise).
        self._coalescers: dict[tuple, tuple[Route, Coalescer[TextInput, Embedded, Embeddings]]] = {}
        self.backlogs = Backlogs(settings.admission_deadline_share)
        self.rates = KeyRates(settings.key_requests_per_minute, settings.key_tokens_per_minute)
        megabytes = settings.response_cache_mb
        self.cache = ResponseCache(int(megabytes * 1024 * 1024)) if megabytes > 0 and not settings.noop_inference else None

    def close(self) -> None:
        for _, coalescer in self._coalescers.values():
            coalescer.close()
        self._pool.shutdown()

    def charge(self, texts: Sequence[TextInput] = (), images: int = 0) -> Standing | None:
        """The request's inputs, counted for its key and charged to its key's limits (``rates.py``)."""
        return self.rates.charge(texts, images)

    def admit(self, model: ServedModel):
        """One slot of ``model``'s in-flight limit for the request in progress (503 if none)."""
        return admit(model, self.settings.max_inflight_requests, self.settings.key_fair_share)

    @staticmethod
    def plan(model: ServedModel, ask: Ask, elsewhere: Mapping[Output, str] = ENDPOINTS) -> Plan:
        """What ``ask`` asks of ``model``, planned by its kind: refused unless the kind gives
        it (saying where to go instead: ``elsewhere``, in the API the request came through),
        its options and prompt checked. Nothing runs yet."""
        model.kind.require(ask.output, model.name, elsewhere)
        return chunked_plan(model, ask, model.kind.plan(model, ask))

    async def run(self, model: ServedModel, plan: Plan, *, timeout_s: float) -> Embeddings:
        """The plan's runs side by side within the request's deadline, then its answer."""
        if plan.chunking is not None and plan.chunking.late:
            return await _within(timeout_s, self._late(model, plan, timeout_s))
        if plan.chunking is not None:
            texts = plan.runs[0].inputs
            plan = await _within(timeout_s, expanded(self._pool, model, plan, self.settings.max_chunks_per_request))
            # Charged for its texts when it came in; the chunks' overlap repeats some: charged now.
            self.rates.charge_more(items_cost(plan.runs[0].inputs) - items_cost(texts))
        runs = [self._run(model, run.route, run.inputs, timeout_s, run.prefix) for run in plan.runs]
        return plan.finish(await _within(timeout_s, run_all(runs)))

    async def answer(self, model: ServedModel, ask: Ask, *, timeout_s: float) -> Embeddings:
        """:meth:`plan`, then :meth:`run`."""
        return await self.run(model, self.plan(model, ask), timeout_s=timeout_s)

    async def _late(self, model: ServedModel, plan: Plan, timeout_s: float) -> Embeddings:
        """A plan of late chunks: its texts laid out as rows in the pool (charged for the
        tokens they run), the rows through the model's late-chunking graph in slices."""
        part = model.kind.late_part(model.name, model.triton_name)
        inputs = plan.runs[0].inputs
        with self.backlogs.admitted(model, part, items_cost, inputs, timeout_s, MIN_READ_COST):
            began = time.perf_counter()
            texts, layout, calls = await laid_out(self._pool, model, plan, self.settings.max_chunks_per_request)
            # Charged for its texts when it came in; its rows' tokens (windows overlap): charged now.
            self.rates.charge_more(layout.tokens - items_cost(texts))

            def send(tensors: dict[str, np.ndarray]) -> Awaitable[np.ndarray]:
                return self.backend.infer(model, part, tensors, CHUNK_EMBEDDINGS, timeout_s=timeout_s)

            return await late_answer(plan, layout, calls, lambda each: self._bounded(send, each), began)

    async def _run(
        self, model: ServedModel, route: Route, inputs: list[Any], timeout_s: float, prefix: str = ""
    ) -> Embeddings:
        """The route's outputs for ``inputs``: those the response cache has from it, and the
        others (each distinct input once) computed and kept there. Images are not cached."""
        if route.static is not None:
            return await self._computed_here(route, inputs, prefix)
        if route.images is not None:
            return await self._route_images(model, route, inputs, timeout_s, prefix)
        cache = self.cache
        if cache is None:
            return await self._compute(model, route, inputs, timeout_s, prefix)
        arrived = time.perf_counter()
        found = cache.lookup(route.serial, prefix, inputs)
        missing = list(dict.fromkeys(value for value, row in zip(inputs, found) if row is None))
        model.cache_misses += sum(row is None for row in found)
        model.cache_hits += len(inputs) - sum(row is None for row in found)
        if not missing:
            return answer_from_cache(inputs, found, [], None, arrived)
        computed = await self._compute(model, route, missing, timeout_s, prefix)
        truncated_rows = computed.truncated_rows or [False] * len(missing)
        cache.store(route.serial, prefix, missing, computed.vectors, computed.token_counts, truncated_rows)
        if len(missing) == len(inputs):
            return computed
        return answer_from_cache(inputs, found, missing, computed, arrived)

    async def _computed_here(self, route: Route, inputs: list[TextInput], prefix: str) -> Embeddings:
        """A route the gateway computes itself (static weights): in the pool, no backend call."""
        arrived = time.perf_counter()
        began, (batch, vectors) = await self._pool.run(_began_then, _static, route, inputs, prefix)
        done = time.perf_counter()
        return Embedded(batch, vectors, began, done, done).share(slice(None), arrived)

    async def _compute(
        self, model: ServedModel, route: Route, inputs: list[TextInput], timeout_s: float, prefix: str = ""
    ) -> Embeddings:
        """The route's outputs for ``inputs``: merged with other requests' where they fit
        one call, else tokenized in the pool and sent in slices."""
        with self.backlogs.admitted(model, route.part, items_cost, inputs, timeout_s, MIN_READ_COST):
            if len(inputs) <= self.batching.coalesced_texts(model.metadata):
                # A prompt is part of each text: prompted texts merge with anyone's. These
                # are a few texts, prefixed on the loop; a large request's, in the pool.
                coalescer = self._coalescer(model, route)
                texts = prefixed(prefix, inputs)
                parts = self.batching.spread(model.metadata, len(texts), coalescer.in_flight)
                if parts == 1:
                    return await coalescer.submit(texts, timeout_s)
                groups = spreading.cut(texts, parts, text_length)
                # Admitted (by cost) as one request: the first part decides for all.
                shares = await run_all([
                    coalescer.submit([texts[row] for row in group], timeout_s, admitted=part > 0)
                    for part, group in enumerate(groups)
                ])
                return spreading.joined(shares, groups)
            arrived = time.perf_counter()
            embedded = await self._tokenize_and_embed(model, route, inputs, timeout_s, prefix)
            return embedded.share(slice(None), arrived)

    def _coalescer(self, model: ServedModel, route: Route) -> Coalescer[TextInput, Embedded, Embeddings]:
        """The route's coalescer; a model loaded again (new routes, new tokenizers) gets new
        ones, and the old ones finish the calls they have."""
        key = (route.part, route.version, route.tasks)
        known = self._coalescers.get(key)
        if known is None or known[0] is not route:
            settings = self.settings
            coalescer = Coalescer(
                _Sender(lambda texts, timeout_s: self._tokenize_and_embed(model, route, texts, timeout_s)),
                max_rows=model.metadata.max_batch_size,
                max_in_flight=self.batching.calls_in_flight(model.metadata),
                bulk_slots=model.metadata.instance_count,
                bulk_busy_rows=settings.bulk_busy_texts,
                bulk_idle_rows=settings.bulk_idle_texts,
                quiet_s=settings.bulk_quiet_s,
                fair_share=settings.key_fair_share,
                admission=self._pacing(model),
            )
            known = self._coalescers[key] = (route, coalescer)
        return known[1]

    def _pacing(self, model: ServedModel) -> CostAdmission | None:
        """Admission by cost, where the coalescer is the model's only batcher (it then sees
        all of the model's online work but the largest requests')."""
        share = self.settings.admission_deadline_share
        if not share or model.metadata.dynamic_batching:
            return None
        pace = Pace(model.metadata.instance_count)
        return CostAdmission(pace, items_cost, deadline_share=share, name=f"model '{model.name}'")

    async def _tokenize_and_embed(
        self, model: ServedModel, route: Route, inputs: list[TextInput], timeout_s: float, prefix: str = ""
    ) -> Embedded:
        tokenize_began, batch = await self._pool.run(_began_then, _tokenize, model, route, inputs, prefix)
        tokenized = time.perf_counter()
        limit = model.metadata.max_batch_size
        if len(inputs) <= limit:
            vectors = await self._send(model, route, batch, slice(None), batch.input_ids.shape[1], timeout_s)
        else:
            vectors = await self._embed_in_slices(model, route, batch, limit, timeout_s)
        return Embedded(batch, vectors, tokenize_began, tokenized, time.perf_counter())

    async def _embed_in_slices(
        self, model: ServedModel, route: Route, batch: TokenBatch, limit: int, timeout_s: float
    ) -> np.ndarray:
        # Sort by length so each slice pads little, send slices concurrently (Triton
        # batches them), then put rows back in request order.
        counts = np.asarray(batch.token_counts)
        order = np.argsort(counts, kind="stable")
        fixed = model.kind.fixed_width()

        def send(rows: np.ndarray) -> Awaitable[np.ndarray]:
            width = int(counts[rows].max())
            if fixed is not None:
                width = fixed
            elif model.metadata.form == "onnxruntime":
                width = bucket_length(width, route.tokenizer.max_length)
            return self._send(model, route, batch, rows, width, timeout_s)

        slices = [order[start : start + limit] for start in range(0, len(order), limit)]
        sorted_vectors = np.concatenate(await self._bounded(send, slices))
        vectors = np.empty_like(sorted_vectors)
        vectors[order] = sorted_vectors
        return vectors

    async def _bounded(self, send: Callable[[Any], Awaitable[np.ndarray]], slices: list) -> list[np.ndarray]:
        """Each slice sent, a bounded number at a time: a huge request does not crowd
        everyone else out of Triton's queue, and a cancelled request stops sending slices."""
        gate = asyncio.Semaphore(self.settings.max_concurrent_chunks)

        async def one(part) -> np.ndarray:
            async with gate:
                return await send(part)

        return await run_all([one(part) for part in slices])

    async def _send(self, model: ServedModel, route: Route, batch: TokenBatch, rows, width: int, timeout_s: float):
        """``rows`` of ``batch`` through the route's graph (its Triton model and version)."""
        kind = model.kind
        tensors = kind.text_inputs(batch, rows, width)
        outputs = await self.backend.infer(
            model, route.part, tensors, kind.output, timeout_s=timeout_s, version=route.version
        )
        return kind.rows(batch, rows, outputs)

    async def _route_images(
        self, model: ServedModel, route: Route, images: Sequence[str | bytes], timeout_s: float, prompt: str = ""
    ) -> Embeddings:
        """Images through an image route: a vision-language model's in two steps, rendered
        with ``prompt``; any other's image graph."""
        if isinstance(route.images, PatchImages):
            return await self._message_images(model, route, images, timeout_s, prompt)
        return await self._images(model, route, images, timeout_s)

    async def _images(self, model: ServedModel, route: Route, images: Sequence[str | bytes], timeout_s: float) -> Embeddings:
        """Images as URLs, data URIs or bytes through an image route: fetched and decoded
        in the image threads, then sent in slices (one per CPU instance at least: the model
        runs each on one core)."""
        with self.backlogs.admitted(model, route.part, len, images, timeout_s):
            started = time.perf_counter()
            pixels = await self.images.load(images, route.images)
            loaded = time.perf_counter()
            kind, metadata = model.kind, model.metadata

            def send(part: np.ndarray) -> Awaitable[np.ndarray]:
                tensors = kind.image_inputs(part)
                return self.backend.infer(model, route.part, tensors, kind.output, timeout_s=timeout_s)

            parts = -(-len(pixels) // metadata.max_batch_size)
            if metadata.gpu is None:
                parts = max(parts, min(metadata.instance_count, len(pixels)))
            size = -(-len(pixels) // parts)
            vectors = np.concatenate(
                await self._bounded(send, [pixels[start : start + size] for start in range(0, len(pixels), size)])
            )
            finished = time.perf_counter()
        # Preparing images is what tokenizing is to texts.
        return Embeddings(vectors, [0] * len(images), 0, tokenize_ms=(loaded - started) * 1000,
                          inference_ms=(finished - loaded) * 1000)


class _Sender:
    def __init__(self, send):
        self.send = send

    share = staticmethod(Embedded.share)


async def _within(timeout_s: float, work: Awaitable[T]) -> T:
    """``work`` under the request's deadline; past it, a 504 for the client."""
    try:
        async with asyncio.timeout(timeout_s):
            return await work
    except TimeoutError:
        raise DeadlineExceeded(f"the request did not finish within its {timeout_s:g}s deadline") from None

