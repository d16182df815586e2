"""Texts, pairs or images in, embeddings or scores out: what a request asks of a model
(``asks.py``), its kind's plan, tokenize or decode off the loop, call Triton, then the
plan's post-processing.

This is the narrow interface between the HTTP side and the compute side. Routes and bulk
lines call :meth:`EmbeddingService.answer` (and :meth:`~EmbeddingService.answer_bulk` for a
batch job's lines, in the bulk lane): the model's kind checks it gives what is asked and
plans it (the route each text takes by its task, with the prompt the request chose,
``prompts.py``), every run goes the same way, and the plan makes the answer. Images go
through :meth:`~EmbeddingService.embed_images` (CLIP models). Routes never see tensors or
Triton. Every text input, a pair included, takes the same path: merged with other
requests' by its route's coalescer, or tokenized in the pool and sent in length-sorted
chunks; a route computed by the gateway (static weights) is tokenized and computed in the
pool, with no Triton call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

from embedgate.contract.kinds.clip import ClipMetadata
from embedgate.contract.preprocess.text import TokenBatch, bucket_length
from embedgate.contract.spec import EMBEDDING, PIXELS

from ..errors import DeadlineExceeded, EmbedgateError
from ..settings import Settings
from ..triton.client import TritonClient
from .backend import resend
from .cache import ResponseCache, answer_from_cache
from .images.loader import ImageLoader
from .requests.asks import Ask, Gathered, Options, Output, Plan, TextInput, prefixed
from .requests.kinds.dense import unit_rows
from .requests.prompts import DEFAULT, PromptChoice
from .requests.quantize import Precision, quantized
from .requests.results import Embedded, Embeddings, ImageEmbeddings
from .requests.routes import Route
from .requests.served import ServedModel
from .requests.static import static_vectors
from .scheduling import spreading
from .scheduling.admission import admit
from .scheduling.backlog import Backlogs
from .scheduling.batching import BatchingPolicy
from .scheduling.coalescing import Coalescer
from .scheduling.concurrency import run_all
from .scheduling.pacing import MIN_READ_COST, Pace, items_cost
from .scheduling.rates import KeyRates, Standing
from .tokens import Tokens

log = logging.getLogger("embedgate.embedding")
# A bulk call's deadline: the job's lease, renewed while it runs, is what bounds bulk work.
BULK_TIMEOUT_S = 3600.0
T = TypeVar("T")




def _began_then(work: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Runs ``work`` and says when it began (in a pool: the wait before it is queue time)."""
    return time.perf_counter(), work(*args)


def _tokenize(model: ServedModel, route: Route, inputs: list[TextInput], prefix: str) -> TokenBatch:
    return route.tokenizer.encode(prefixed(prefix, inputs), model.metadata.form == "onnxruntime")


def _static(route: Route, inputs: list[TextInput], prefix: str) -> tuple[TokenBatch, np.ndarray]:
    batch = route.tokenizer.encode(prefixed(prefix, inputs))
    assert route.static is not None
    return batch, static_vectors(route.static, batch.input_ids, batch.attention_mask)


class EmbeddingService:
    def __init__(
        self, settings: Settings, client: TritonClient, triton: resend.Restartable | None = None
    ):
        self.settings = settings
        self.batching = BatchingPolicy(settings)
        self.client = client
        self.triton = triton
        # Set by the gateway: whoever loads models here (the registry, or a worker's primary).
        self.reload_lost: resend.ReloadLost | None = None
        self._pool = ThreadPoolExecutor(settings.tokenizer_threads, thread_name_prefix="tokenize")
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
        if settings.noop_inference:
            log.warning("no-op inference is on: embeddings are zero vectors and no model runs")

    def close(self) -> None:
        for _, coalescer in self._coalescers.values():
            coalescer.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def charge(self, texts: Sequence[TextInput] = (), images: int = 0) -> Standing | None:
        """The request's inputs, counted for its key and charged to its key's limits (``rates.py``)."""
        return self.rates.charge(texts, images)

    def admit(self, model: ServedModel):
        """One slot of ``model``'s in-flight limit for the request in progress (503 if none)."""
        return admit(model, self.settings.max_inflight_requests, self.settings.key_fair_share)

    async def answer(self, model: ServedModel, ask: Ask, *, timeout_s: float) -> Embeddings:
        """What ``ask`` asks of ``model``: refused unless its kind gives it (saying where to
        go), its options and prompt checked, its plan's runs side by side within the
        request's deadline, then the plan's answer."""
        plan = self._plan(model, ask)
        runs = [self._run(model, run.route, run.inputs, timeout_s, run.prefix) for run in plan.runs]
        # One slot of the model's in-flight limit for the request, whatever its runs.
        with self.admit(model):
            results = await _within(timeout_s, run_all(runs))
        return plan.finish(results)

    async def answer_bulk(self, model: ServedModel, asks: Sequence[Ask]) -> list[Embeddings | EmbedgateError]:
        """Each of a batch job's lines answered as :meth:`answer` answers it (or its error),
        their inputs together through each route's bulk lane: behind every online request,
        in calls of texts of about the same length, with no request deadline (the job's
        lease bounds it)."""
        plans: list[Plan | EmbedgateError] = []
        for ask in asks:
            try:
                plans.append(self._plan(model, ask))
            except EmbedgateError as error:
                plans.append(error)
        gathered = Gathered(plans)
        done = await run_all([self.run_bulk(model, route, inputs) for route, inputs in gathered.routes.values()])
        return gathered.finished(dict(zip(gathered.routes, done)))

    @staticmethod
    def _plan(model: ServedModel, ask: Ask) -> Plan:
        model.kind.require(ask.output, model.name)
        return model.kind.plan(model, ask)

    async def embed_texts(
        self,
        model: ServedModel,
        texts: list[str],
        *,
        normalize: bool,
        timeout_s: float,
        prompt: PromptChoice = DEFAULT,
        precision: Precision = "float32",
    ) -> Embeddings:
        """``texts``' dense embeddings, each text with the prompt ``prompt`` chooses before it
        (the model's default prompt when it chooses none), as ``SentenceTransformer.encode``
        does; in ``precision`` as ``quantize_embeddings`` gives it, with the model's ranges."""
        options = Options(normalize=normalize, precision=precision)
        return await self.answer(model, Ask(Output.EMBED, list(texts), prompt, options), timeout_s=timeout_s)

    async def run_bulk(self, model: ServedModel, route: Route, inputs: list[TextInput]) -> Embeddings:
        """The route's outputs for a batch job's inputs (prompts already in them), in the
        coalescer's bulk lane: behind every online request, in calls of texts of about the
        same length. No admission slot and no request deadline: the job's lease bounds it."""
        if route.static is not None:
            return await self._computed_here(route, inputs, "")
        order = sorted(range(len(inputs)), key=lambda row: _length(inputs[row]))
        step = self.settings.bulk_busy_texts
        coalescer = self._coalescer(model, route)
        groups = [[inputs[row] for row in order[start : start + step]] for start in range(0, len(order), step)]
        arrived = time.perf_counter()
        parts = await coalescer.submit_bulk(groups, BULK_TIMEOUT_S)
        vectors = np.empty((len(inputs),) + parts[0].vectors.shape[1:], dtype=parts[0].vectors.dtype)
        vectors[order] = np.concatenate([part.vectors for part in parts])
        counts = [0] * len(inputs)
        for row, count in zip(order, (count for part in parts for count in part.token_counts)):
            counts[row] = count
        return Embeddings(
            vectors, counts, sum(part.truncated for part in parts),
            tokenize_ms=sum(part.tokenize_ms for part in parts),
            inference_ms=(time.perf_counter() - arrived) * 1000,
        )

    async def _run(
        self, model: ServedModel, route: Route, inputs: list[TextInput], timeout_s: float, prefix: str = ""
    ) -> Embeddings:
        """The route's outputs for ``inputs``: those the response cache has from it, and the
        others (each distinct input once) computed and kept there."""
        if route.static is not None:
            return await self._computed_here(route, inputs, prefix)
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
        """A route the gateway computes itself (static weights): in the pool, no Triton call."""
        arrived = time.perf_counter()
        began, (batch, vectors) = await asyncio.get_running_loop().run_in_executor(
            self._pool, _began_then, _static, route, inputs, prefix
        )
        done = time.perf_counter()
        return Embedded(batch, vectors, began, done, done).share(slice(None), arrived)

    async def _compute(
        self, model: ServedModel, route: Route, inputs: list[TextInput], timeout_s: float, prefix: str = ""
    ) -> Embeddings:
        """The route's outputs for ``inputs``: merged with other requests' where they fit
        one call, else tokenized in the pool and sent in chunks."""
        with self.admit(model), self.backlogs.admitted(model, 0, lambda: items_cost(inputs), timeout_s, MIN_READ_COST):
            if len(inputs) <= self.batching.coalesced_texts(model.metadata):
                # A prompt is part of each text: prompted texts merge with anyone's. These
                # are a few texts, prefixed on the loop; a large request's, in the pool.
                coalescer = self._coalescer(model, route)
                texts = prefixed(prefix, inputs)
                parts = self.batching.spread(model.metadata, len(texts), coalescer.in_flight)
                if parts == 1:
                    return await coalescer.submit(texts, timeout_s)
                groups = spreading.cut(texts, parts, _length)
                # Admitted (by cost) as one request: the first part decides for all.
                shares = await run_all([
                    coalescer.submit([texts[row] for row in group], timeout_s, admitted=part > 0)
                    for part, group in enumerate(groups)
                ])
                return spreading.joined(shares, groups)
            arrived = time.perf_counter()
            embedded = await self._tokenize_and_embed(model, route, inputs, timeout_s, prefix)
            return embedded.share(slice(None), arrived)

    def _coalescer(self, model: ServedModel, route: Route | None = None) -> Coalescer[TextInput, Embedded, Embeddings]:
        """The route's coalescer (the model's first route's by default); a model loaded
        again (new routes, new tokenizers) gets new ones, and the old ones finish the calls
        they have."""
        route = route or model.routes[0]
        key = (route.part, route.version, route.tasks)
        known = self._coalescers.get(key)
        if known is None or known[0] is not route:
            settings = self.settings
            coalescer = Coalescer(
                lambda texts, timeout_s: self._tokenize_and_embed(model, route, texts, timeout_s),
                Embedded.share,
                max_rows=model.metadata.max_batch_size,
                max_in_flight=self.batching.calls_in_flight(model.metadata),
                bulk_slots=model.metadata.instance_count,
                bulk_busy_rows=settings.bulk_busy_texts,
                bulk_idle_rows=settings.bulk_idle_texts,
                quiet_s=settings.bulk_quiet_s,
                fair_share=settings.key_fair_share,
                **self._pacing(model),
            )
            known = self._coalescers[key] = (route, coalescer)
        return known[1]

    def _pacing(self, model: ServedModel) -> dict[str, Any]:
        """Admission by cost, where the coalescer is the model's only batcher (it then sees
        all of the model's online work but the largest requests')."""
        share = self.settings.admission_deadline_share
        if not share or model.metadata.dynamic_batching:
            return {}
        pace = Pace(model.metadata.instance_count)
        return {"pace": pace, "cost": items_cost, "deadline_share": share, "name": f"model '{model.name}'"}

    async def _tokenize_and_embed(
        self, model: ServedModel, route: Route, inputs: list[TextInput], timeout_s: float, prefix: str = ""
    ) -> Embedded:
        loop = asyncio.get_running_loop()
        tokenize_began, batch = await loop.run_in_executor(
            self._pool, _began_then, _tokenize, model, route, inputs, prefix
        )
        tokenized = time.perf_counter()
        limit = model.metadata.max_batch_size
        if self.settings.noop_inference:
            # Everything a request costs the gateway, minus the model.
            vectors = model.kind.rows(batch, slice(None), model.kind.noop_outputs(batch))
        elif len(inputs) <= limit:
            vectors = await self._send(model, route, batch, slice(None), batch.input_ids.shape[1], timeout_s)
        else:
            vectors = await self._embed_chunked(model, route, batch, limit, timeout_s)
        return Embedded(batch, vectors, tokenize_began, tokenized, time.perf_counter())

    async def _embed_chunked(
        self, model: ServedModel, route: Route, batch: TokenBatch, limit: int, timeout_s: float
    ) -> np.ndarray:
        # Sort by length so each chunk pads little, send chunks concurrently (Triton
        # batches them), then put rows back in request order.
        counts = np.asarray(batch.token_counts)
        order = np.argsort(counts, kind="stable")
        # A bounded number of chunks in flight: a huge request does not crowd everyone
        # else out of Triton's queue, and a cancelled request stops sending chunks.
        gate = asyncio.Semaphore(self.settings.max_concurrent_chunks)
        fixed = model.kind.fixed_width()

        async def send(rows: np.ndarray) -> np.ndarray:
            width = int(counts[rows].max())
            if fixed is not None:
                width = fixed
            elif model.metadata.form == "onnxruntime":
                width = bucket_length(width, route.tokenizer.max_length)
            async with gate:
                return await self._send(model, route, batch, rows, width, timeout_s)

        parts = await run_all([send(order[start : start + limit]) for start in range(0, len(order), limit)])
        sorted_vectors = np.concatenate(parts)
        vectors = np.empty_like(sorted_vectors)
        vectors[order] = sorted_vectors
        return vectors

    async def _send(self, model: ServedModel, route: Route, batch: TokenBatch, rows, width: int, timeout_s: float):
        """``rows`` of ``batch`` through the route's graph (its Triton model and version)."""
        kind = model.kind
        tensors = kind.text_inputs(batch, rows, width)
        outputs = await self._surviving_restarts(
            model,
            lambda: self.client.infer(route.part, tensors, kind.output, timeout_s=timeout_s, version=route.version),
        )
        return kind.rows(batch, rows, outputs)

    def _surviving_restarts(self, model: ServedModel, call: Callable[[], Awaitable[np.ndarray]]):
        return resend.surviving(call, model.name, self.triton, self.reload_lost)

    async def embed_images(
        self,
        model: ServedModel,
        images: Sequence[str | bytes],
        *,
        normalize: bool,
        timeout_s: float,
        precision: Precision = "float32",
    ) -> ImageEmbeddings:
        """Images as URLs, data URIs or bytes, through a CLIP model's image tower (binary
        precisions too; int8/uint8 have no calibrated ranges for images)."""
        model.kind.require(Output.IMAGES, model.name)
        result = await _within(timeout_s, self._embed_images(model, images, normalize, timeout_s))
        vectors = quantized(result.vectors, precision, None, normalized=normalize, what="image embeddings")
        return dataclasses.replace(result, vectors=vectors)

    async def _embed_images(
        self, model: ServedModel, images: Sequence[str | bytes], normalize: bool, timeout_s: float
    ) -> ImageEmbeddings:
        clip = model.metadata.record_of(ClipMetadata)
        assert clip is not None
        with self.admit(model), self.backlogs.admitted(model, 1, lambda: float(len(images)), timeout_s):
            started = time.perf_counter()
            pixels = await self.images.load(images, clip.image)
            loaded = time.perf_counter()
            if self.settings.noop_inference:
                vectors = np.zeros((len(pixels), model.metadata.embedding_dim), dtype=np.float32)
            else:
                gate = asyncio.Semaphore(self.settings.max_concurrent_chunks)
                image_tower = model.triton_names[1]

                async def send(chunk: np.ndarray) -> np.ndarray:
                    async with gate:
                        return await self._surviving_restarts(
                            model,
                            lambda: self.client.infer(image_tower, {PIXELS: chunk}, EMBEDDING, timeout_s=timeout_s),
                        )

                # A call per CPU instance at least: the model runs each on one core.
                parts = -(-len(pixels) // model.metadata.max_batch_size)
                if model.metadata.gpu is None:
                    parts = max(parts, min(model.metadata.instance_count, len(pixels)))
                size = -(-len(pixels) // parts)
                chunks = [pixels[start : start + size] for start in range(0, len(pixels), size)]
                vectors = np.concatenate(await run_all([send(chunk) for chunk in chunks]))
            finished = time.perf_counter()
        return ImageEmbeddings(
            vectors=unit_rows(vectors) if normalize else vectors,
            load_ms=(loaded - started) * 1000,
            inference_ms=(finished - loaded) * 1000,
        )


async def _within(timeout_s: float, work: Awaitable[T]) -> T:
    """``work`` under the request's deadline; past it, a 504 for the client."""
    try:
        async with asyncio.timeout(timeout_s):
            return await work
    except TimeoutError:
        raise DeadlineExceeded(f"the request did not finish within its {timeout_s:g}s deadline") from None


def _length(text: TextInput) -> int:
    return len(text) if isinstance(text, str) else len(text[0]) + len(text[1])
