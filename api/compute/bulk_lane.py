"""The bulk lane of the embedding service (``service.py``): a batch job's lines, planned as
online requests are, their inputs together through each route's coalescer behind every
online request, in calls of texts of about the same length, with no request deadline (the
job's lease bounds it). A line of late chunks runs as an online request of them does."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from ..errors import EmbedgateError, InvalidImage
from ..settings import Settings
from .document_chunks import expanded_or_error
from .requests.asks import Ask, Gathered, Plan, TextInput
from .requests.results import Embeddings
from .requests.routes import Route
from .requests.served import ServedModel
from .scheduling.concurrency import run_all
from .scheduling.threads import OffLoopThreads

# A bulk call's deadline: the job's lease, renewed while it runs, is what bounds bulk work.
BULK_TIMEOUT_S = 3600.0


class BulkLane:
    """Mixed into ``EmbeddingService``, whose plans, coalescers, pool and routes it uses."""

    settings: Settings
    _pool: OffLoopThreads
    _route_images: Callable[..., Awaitable[Embeddings]]

    async def answer_bulk(self, model: ServedModel, asks: Sequence[Ask]) -> list[Embeddings | EmbedgateError]:
        """Each of a batch job's lines answered as :meth:`answer` answers it (or its error),
        their inputs together through each route's bulk lane: behind every online request,
        in calls of texts of about the same length, with no request deadline (the job's
        lease bounds it)."""
        plans: list[Plan | EmbedgateError] = []
        for ask in asks:
            try:
                plans.append(self.plan(model, ask))
            except EmbedgateError as error:
                plans.append(error)
        return await self.run_bulk_plans(model, plans)

    async def run_bulk_plans(
        self, model: ServedModel, plans: list[Plan | EmbedgateError]
    ) -> list[Embeddings | EmbedgateError]:
        """Each plan's answer (or the error in its place), their inputs together through
        each route's bulk lane."""
        limit = self.settings.max_chunks_per_request
        # Late chunks run as rows of their own graph; every other plan's inputs, together.
        late = {
            index: plan for index, plan in enumerate(plans)
            if isinstance(plan, Plan) and plan.chunking is not None and plan.chunking.late
        }
        gathered = Gathered([
            await expanded_or_error(self._pool, model, plan, limit) for index, plan in enumerate(plans) if index not in late
        ])
        done = await run_all([
            self._bulk_call(model, route, inputs, gathered.prompts.get(key, ""))
            for key, (route, inputs) in gathered.routes.items()
        ])
        answers = iter(gathered.finished(dict(zip(gathered.routes, done))))
        outcomes = dict(zip(late, await run_all([self._late_or_error(model, plan) for plan in late.values()])))
        return [outcomes[index] if index in late else next(answers) for index in range(len(plans))]

    async def _late_or_error(self, model: ServedModel, plan: Plan) -> Embeddings | EmbedgateError:
        """:meth:`_late` for a batch job's line, in the bulk lane's time: its refusal is its own outcome."""
        try:
            return await self._late(model, plan, BULK_TIMEOUT_S)
        except EmbedgateError as error:
            return error

    async def _bulk_call(
        self, model: ServedModel, route: Route, inputs: list[Any], prompt: str = ""
    ) -> Embeddings | EmbedgateError:
        """:meth:`run_bulk`; an image route's call is one request's, so an image that cannot
        be used is that request's error (a text route's failure is everyone's)."""
        try:
            return await self.run_bulk(model, route, inputs, prompt)
        except InvalidImage as error:
            if route.images is None:
                raise
            return error

    async def run_bulk(self, model: ServedModel, route: Route, inputs: list[TextInput], prompt: str = "") -> Embeddings:
        """The route's outputs for a batch job's inputs (prompts already in texts; an image
        route's ``prompt`` beside its images), in the coalescer's bulk lane: behind every
        online request, in calls of texts of about the same length. No admission slot and
        no request deadline: the job's lease bounds it."""
        if route.static is not None:
            return await self._computed_here(route, inputs, "")
        if route.images is not None:
            # Images have no bulk lane: fetched, prepared and sent as an online request's are.
            return await self._route_images(model, route, inputs, BULK_TIMEOUT_S, prompt)
        order = sorted(range(len(inputs)), key=lambda row: text_length(inputs[row]))
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


def text_length(text: TextInput) -> int:
    """A text's (a pair's) characters: texts of about the same length share a call."""
    return len(text) if isinstance(text, str) else len(text[0]) + len(text[1])
