"""One dispatch for every run, online and in the bulk lane: a run's inputs through the step
its kind chose (``requests/steps.py``), whatever the step is.

Online: the inputs the response cache has from the route are answered from it (where the
step's outputs are kept there), the others computed and kept; work for a model Triton
batches is admitted by cost first (``scheduling/backlog.py``); then, where requests' inputs
share calls, the route's coalescer merges them with other requests' (a large request spread
over idle instances), else the step runs them alone. In the bulk lane (a batch job's
inputs, with no request deadline: the job's lease bounds them), shared inputs go through
the coalescer's bulk lane, behind every online request, in calls of texts of about the same
length; any other step runs them as an online request's.

Each route of each loaded model has its own coalescer: a route's texts never share a call
with another's (they go through other modules, or are tokenized otherwise).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..settings import Settings
from .cache import ResponseCache, answer_from_cache
from .engine import ComputeEngine
from .requests.asks import TextInput
from .requests.results import Embeddings
from .requests.routes import Route
from .requests.served import ServedModel
from .requests.steps import Step, prefixed
from .scheduling import spreading
from .scheduling.backlog import Backlogs
from .scheduling.batching import BatchingPolicy
from .scheduling.coalescing import Coalescer
from .scheduling.concurrency import run_all
from .scheduling.cost_admission import CostAdmission
from .scheduling.pacing import Pace


class Dispatch:
    def __init__(self, settings: Settings, engine: ComputeEngine, cache: ResponseCache | None, backlogs: Backlogs):
        self.settings = settings
        self.batching = BatchingPolicy(settings)
        self.engine = engine
        self.cache = cache
        self.backlogs = backlogs
        self._coalescers: dict[tuple, tuple[Route, Coalescer[Any, Any, Embeddings]]] = {}

    def close(self) -> None:
        for _, coalescer in self._coalescers.values():
            coalescer.close()

    async def outputs(
        self, model: ServedModel, route: Route, step: Step, inputs: list[Any], prefix: str, timeout_s: float,
        *, bulk: bool = False,
    ) -> Embeddings:
        """``inputs`` (``prefix``: their prompt) through ``step`` on ``route``: online, those
        the response cache has (where the step's outputs are kept) from it, and the others
        (each distinct input once) computed and kept there; in the bulk lane (``bulk``:
        shared inputs with their prompts in them), behind every online request."""
        if bulk and step.coalesced:
            return await self._bulk(model, route, step, inputs, timeout_s)
        cache = self.cache
        if cache is None or not step.cached or bulk:
            return await self._computed(model, route, step, inputs, prefix, timeout_s)
        arrived = time.perf_counter()
        found = cache.lookup(route.serial, prefix, inputs)
        missing = list(dict.fromkeys(value for value, row in zip(inputs, found) if row is None))
        model.cache_misses += sum(row is None for row in found)
        model.cache_hits += len(inputs) - sum(row is None for row in found)
        if not missing:
            return answer_from_cache(inputs, found, [], None, arrived)
        computed = await self._computed(model, route, step, missing, prefix, timeout_s)
        truncated_rows = computed.truncated_rows or [False] * len(missing)
        cache.store(route.serial, prefix, missing, computed.vectors, computed.token_counts, truncated_rows)
        if len(missing) == len(inputs):
            return computed
        return answer_from_cache(inputs, found, missing, computed, arrived)

    async def _computed(
        self, model: ServedModel, route: Route, step: Step, inputs: list[Any], prefix: str, timeout_s: float
    ) -> Embeddings:
        """``inputs`` admitted by cost where Triton batches the model, then merged with other
        requests' where the step shares calls and they fit one, else run by the step."""
        triton_part = step.triton_part(route)
        with self.backlogs.admitted(model, triton_part, step.cost, inputs, timeout_s, step.min_read):
            if step.coalesced and len(inputs) <= self.batching.coalesced_texts(model.metadata):
                # A prompt is part of each text: prompted texts merge with anyone's. These
                # are a few texts, prefixed on the loop; a large request's, in the pool.
                coalescer = self._coalescer(model, route, step)
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
            return await step.run(self.engine, model, route, inputs, prefix, timeout_s)

    async def _bulk(
        self, model: ServedModel, route: Route, step: Step, texts: list[TextInput], timeout_s: float
    ) -> Embeddings:
        """A batch job's texts (prompts in them) in the coalescer's bulk lane, in groups of
        about the same length; no admission slot (the job's lease bounds them)."""
        order = sorted(range(len(texts)), key=lambda row: text_length(texts[row]))
        step_rows = self.settings.bulk_busy_texts
        coalescer = self._coalescer(model, route, step)
        groups = [[texts[row] for row in order[start : start + step_rows]] for start in range(0, len(order), step_rows)]
        arrived = time.perf_counter()
        parts = await coalescer.submit_bulk(groups, timeout_s)
        vectors = np.empty((len(texts),) + parts[0].vectors.shape[1:], dtype=parts[0].vectors.dtype)
        vectors[order] = np.concatenate([part.vectors for part in parts])
        counts = [0] * len(texts)
        for row, count in zip(order, (count for part in parts for count in part.token_counts)):
            counts[row] = count
        return Embeddings(
            vectors, counts, sum(part.truncated for part in parts),
            tokenize_ms=sum(part.tokenize_ms for part in parts),
            inference_ms=(time.perf_counter() - arrived) * 1000,
        )

    def _coalescer(self, model: ServedModel, route: Route, step: Step) -> Coalescer[Any, Any, Embeddings]:
        """The route's coalescer; a model loaded again (new routes, new tokenizers) gets new
        ones, and the old ones finish the calls they have."""
        key = (route.part, route.version, route.tasks)
        known = self._coalescers.get(key)
        if known is None or known[0] is not route:
            settings = self.settings
            coalescer: Coalescer[Any, Any, Embeddings] = Coalescer(
                step.sender(self.engine, model, route),
                max_rows=model.metadata.max_batch_size,
                max_in_flight=self.batching.calls_in_flight(model.metadata),
                bulk_slots=model.metadata.instance_count,
                bulk_busy_rows=settings.bulk_busy_texts,
                bulk_idle_rows=settings.bulk_idle_texts,
                quiet_s=settings.bulk_quiet_s,
                admission=self._admission(model, step),
                fair_share=settings.key_fair_share,
            )
            known = self._coalescers[key] = (route, coalescer)
        return known[1]

    def _admission(self, model: ServedModel, step: Step) -> CostAdmission | None:
        """Admission by cost, where the coalescer is the model's only batcher (it then sees
        all of the model's online work but the largest requests')."""
        share = self.settings.admission_deadline_share
        if not share or model.metadata.dynamic_batching:
            return None
        return CostAdmission(
            Pace(model.metadata.instance_count), step.cost, deadline_share=share, name=f"model '{model.name}'"
        )


def text_length(text: TextInput) -> int:
    """A text's (a pair's) characters: texts of about the same length share a call."""
    return len(text) if isinstance(text, str) else len(text[0]) + len(text[1])
