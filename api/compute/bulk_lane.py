"""The bulk lane: a batch job's lines, planned as online requests are, run through the same
dispatch (``dispatch.py``) behind every online request, with no request deadline (the
job's lease bounds them). The lines' inputs go together where their step joins them (texts,
prompts in them: one call per route, in the coalescer's bulk lane); any other run is a
call of the line's own, whose refusal is that line's outcome (an image that cannot be
used, late chunks that cannot be cut)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from ..errors import EmbedgateError
from .dispatch import Dispatch
from .document_chunks import expanded_or_error
from .engine import ComputeEngine
from .requests.asks import Ask, Plan, TextInput
from .requests.results import Embeddings
from .requests.routes import Route
from .requests.served import ServedModel
from .requests.steps import Step, prefixed
from .scheduling.concurrency import run_all

# A bulk call's deadline: the job's lease, renewed while it runs, is what bounds bulk work.
BULK_TIMEOUT_S = 3600.0


class BulkLane:
    def __init__(self, dispatch: Dispatch, engine: ComputeEngine):
        self.dispatch = dispatch
        self.engine = engine

    async def answer(self, model: ServedModel, asks: Sequence[Ask]) -> list[Embeddings | EmbedgateError]:
        """Each line's answer as an online request of it would be (or its error)."""
        plans: list[Plan | EmbedgateError] = []
        for ask in asks:
            try:
                plans.append(model.kind.planned(model, ask))
            except EmbedgateError as error:
                plans.append(error)
        return await self.run_plans(model, plans)

    async def run_plans(
        self, model: ServedModel, plans: list[Plan | EmbedgateError]
    ) -> list[Embeddings | EmbedgateError]:
        """Each plan's answer (or the error in its place), their inputs together where their
        steps join them."""
        gathered = Gathered([await expanded_or_error(self.engine, model, plan) for plan in plans])
        done = await run_all([
            self._call(model, route, step, inputs, gathered.prompts.get(key, ""))
            for key, (route, step, inputs) in gathered.calls.items()
        ])
        return gathered.finished(dict(zip(gathered.calls, done)))

    async def _call(
        self, model: ServedModel, route: Route, step: Step, inputs: list[Any], prompt: str
    ) -> Embeddings | EmbedgateError:
        """One call's outputs; a line's own call failing as its step says is that line's
        error (a joined call's failure is everyone's)."""
        try:
            return await self.dispatch.outputs(model, route, step, inputs, prompt, BULK_TIMEOUT_S, bulk=True)
        except step.own_errors as error:
            return error  # type: ignore[return-value]


class Gathered:
    """Several requests' plans (or their errors) as a batch job's calls: a joined step's
    inputs (``Step.joined``: texts, prompts in them) in one call per route and step; any
    other's each run a call of its own, its prompt kept beside its inputs (a vision-language
    model renders it with each image), so an input that cannot be used is the error of the
    request that sent it, not of the others."""

    def __init__(self, plans: list[Plan | EmbedgateError]):
        self.plans = plans
        # A key per call -> (route, step, its inputs); each plan's runs as (key, start, stop).
        self.calls: dict[Hashable, tuple[Route, Step, list[TextInput]]] = {}
        self.prompts: dict[Hashable, str] = {}
        self.spans: list[list[tuple[Hashable, int, int]]] = []
        # The calls of one run's own: their output is the run's whole (late chunks' chunks too).
        self.own: set[Hashable] = set()
        for index, plan in enumerate(plans):
            mine = []
            for number, run in enumerate(plan.runs if isinstance(plan, Plan) else ()):
                step = run.step
                key: Hashable = (run.route, step) if step.joined else (index, number)
                _, _, inputs = self.calls.setdefault(key, (run.route, step, []))
                mine.append((key, len(inputs), len(inputs) + len(run.inputs)))
                if step.joined:
                    inputs.extend(prefixed(run.prefix, run.inputs))
                else:
                    self.prompts[key] = run.prefix
                    self.own.add(key)
                    inputs.extend(run.inputs)
            self.spans.append(mine)

    def finished(self, outputs: dict[Hashable, Embeddings | EmbedgateError]) -> list[Embeddings | EmbedgateError]:
        """Each plan's answer from the calls' ``outputs`` (or its error: its own, or that of
        a call of its own that failed)."""
        answers: list[Embeddings | EmbedgateError] = []
        for plan, mine in zip(self.plans, self.spans):
            if not isinstance(plan, Plan):
                answers.append(plan)
                continue
            failed = next((outputs[key] for key, _, _ in mine if isinstance(outputs[key], EmbedgateError)), None)
            if failed is not None:
                answers.append(failed)  # type: ignore[arg-type]
                continue
            try:
                answers.append(plan.finish([
                    outputs[key] if key in self.own else outputs[key].rows(start, stop)  # type: ignore[union-attr]
                    for key, start, stop in mine
                ]))
            except EmbedgateError as error:
                answers.append(error)
        return answers
