"""Texts, pairs or images in, embeddings or scores out: what a request asks of a model
(``requests/asks.py``), its kind's plan, each run through the step its kind chose, then
the plan's post-processing.

This is the narrow interface between the endpoints and the compute side. Endpoints call
:meth:`EmbeddingService.plan` and :meth:`~EmbeddingService.run` (or :meth:`~EmbeddingService.answer`,
both; :meth:`~EmbeddingService.run_bulk_plans` for a batch job's lines, in the bulk lane)
inside their envelope, which holds the request's one admission slot: the model's kind
checks it gives what is asked and plans it (the route each input takes by its task, with
the prompt the request chose, and the step each run goes through), and every run goes the
same way, whatever its step (``dispatch.py``: the response cache, admission by cost, the
route's coalescer, the step's own work on the tokenizer pool, the image threads and the
backend). Endpoints never see tensors or the backend.

The service is built of objects with one job each: the dispatch (``dispatch.py``), the
bulk lane (``bulk_lane.py``), the engine the steps run on (``engine.py``), the response
cache (``cache.py``), the backlogs of the models Triton batches and the keys' limits
(``scheduling/``). A request's own chunks, long texts cut for ``chunking``, are inputs like
any other (``document_chunks.py``); late chunks are a step of the dense kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import TypeVar

from ..errors import DeadlineExceeded, EmbedgateError
from ..settings import Settings
from .backend.base import Backend
from .bulk_lane import BulkLane
from .cache import ResponseCache
from .dispatch import Dispatch
from .document_chunks import expanded
from .engine import ComputeEngine
from .images.loader import ImageLoader
from .requests.asks import ASKED_AT, Ask, Output, Plan, TextInput
from .requests.results import Embeddings
from .requests.served import ServedModel
from .scheduling.admission import admit
from .scheduling.backlog import Backlogs
from .scheduling.concurrency import run_all
from .scheduling.rates import KeyRates, Standing
from .scheduling.threads import OffLoopThreads
from .tokens import Tokens

T = TypeVar("T")


class EmbeddingService:
    def __init__(self, settings: Settings, backend: Backend):
        self.settings = settings
        self.backend = backend
        self._pool = OffLoopThreads(settings.tokenizer_threads, "tokenize")
        # Tokenizing in full and decoding (TEI's /tokenize, /decode), in the same pool.
        self.tokens = Tokens(self._pool)
        self.images = ImageLoader(settings)
        self.backlogs = Backlogs(settings.admission_deadline_share)
        megabytes = settings.response_cache_mb
        self.cache = ResponseCache(int(megabytes * 1024 * 1024)) if megabytes > 0 and not settings.noop_inference else None
        rates = KeyRates(settings.key_requests_per_minute, settings.key_tokens_per_minute)
        self.engine = ComputeEngine(settings, backend, self._pool, self.images, rates)
        self.dispatch = Dispatch(settings, self.engine, self.cache, self.backlogs)
        self.bulk_lane = BulkLane(self.dispatch, self.engine)

    @property
    def rates(self) -> KeyRates:
        """The keys' limits (``scheduling/rates.py``), which the engine charges too."""
        return self.engine.rates

    @rates.setter
    def rates(self, rates: KeyRates) -> None:
        self.engine.rates = rates

    def close(self) -> None:
        self.dispatch.close()
        self._pool.shutdown()

    def charge(self, texts: Sequence[TextInput] = (), images: int = 0) -> Standing | None:
        """The request's inputs, counted for its key and charged to its key's limits (``rates.py``)."""
        return self.engine.rates.charge(texts, images)

    def admit(self, model: ServedModel):
        """One slot of ``model``'s in-flight limit for the request in progress (503 if none)."""
        return admit(model, self.settings.max_inflight_requests, self.settings.key_fair_share)

    @staticmethod
    def plan(model: ServedModel, ask: Ask, elsewhere: Mapping[Output, str] = ASKED_AT) -> Plan:
        """What ``ask`` asks of ``model``, planned by its kind: refused unless the kind gives
        it (saying where to go instead: ``elsewhere``, in the API the request came through),
        its options and prompt checked. Nothing runs yet."""
        return model.kind.planned(model, ask, elsewhere)

    async def run(self, model: ServedModel, plan: Plan, *, timeout_s: float) -> Embeddings:
        """The plan's runs side by side within the request's deadline, then its answer."""
        if plan.chunking is not None:
            plan = await _within(timeout_s, expanded(self.engine, model, plan))
        outputs = self.dispatch.outputs
        runs = [outputs(model, run.route, run.step, run.inputs, run.prefix, timeout_s) for run in plan.runs]
        return plan.finish(await _within(timeout_s, run_all(runs)))

    async def answer(self, model: ServedModel, ask: Ask, *, timeout_s: float) -> Embeddings:
        """:meth:`plan`, then :meth:`run`."""
        return await self.run(model, self.plan(model, ask), timeout_s=timeout_s)

    async def answer_bulk(self, model: ServedModel, asks: Sequence[Ask]) -> list[Embeddings | EmbedgateError]:
        """Each of a batch job's lines answered as :meth:`answer` answers it (or its error),
        in the bulk lane (``bulk_lane.py``)."""
        return await self.bulk_lane.answer(model, asks)

    async def run_bulk_plans(
        self, model: ServedModel, plans: list[Plan | EmbedgateError]
    ) -> list[Embeddings | EmbedgateError]:
        """Each of a batch job's planned lines answered (or the error in its place), in the bulk lane."""
        return await self.bulk_lane.run_plans(model, plans)


async def _within(timeout_s: float, work: Awaitable[T]) -> T:
    """``work`` under the request's deadline; past it, a 504 for the client."""
    try:
        async with asyncio.timeout(timeout_s):
            return await work
    except TimeoutError:
        raise DeadlineExceeded(f"the request did not finish within its {timeout_s:g}s deadline") from None
