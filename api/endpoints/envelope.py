"""The envelope every endpoint runs in, written once: check -> ask -> respond.

An endpoint is one operation as one API asks for it (``/infer``, ``/v1/embeddings``, TEI's
``/embed``, ``/rerank``...). It says three things: how its body is checked into a
:class:`Call` (the model, what is asked of it, the inputs its key is charged for), how the
results become the answer's body, and the headers of its own the answer carries.
Everything around them is here: the clock, the model's kind asked whether it gives what is
asked (saying where to go instead, in the endpoint's API), the key's charge (429 past its
limits), one slot of the model's in-flight limit for the whole request (503 when full), the
embedding service within the request's deadline, the timing and rate-limit headers; and,
where loads on a first request are on, a model in the repository but not loaded loaded for
the request within its deadline (``models/first_request.py``), the wait in a header.

The HTTP routes of every API call an endpoint; a batch job's lines call the same
endpoints' :meth:`Endpoint.answer_lines`, so a line is answered by the route's own code.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from ..compute.requests.asks import ASKED_AT, Ask, Output, Plan, TextInput
from ..compute.requests.results import Embeddings
from ..compute.requests.served import ServedModel
from ..compute.scheduling.concurrency import run_all
from ..compute.service import EmbeddingService
from ..errors import EmbedgateError, ModelNotLoaded
from ..models.first_request import FirstRequestLoads
from ..models.names import split_clip_key
from ..models.registry import ModelRegistry
from ..settings import Settings
from ..telemetry import tag_model
from .rate_limits import rate_limit_headers
from .statuses import openai_error_of
from .timing import LOAD_HEADER, inference_headers

Body = TypeVar("Body", bound=BaseModel)


@dataclass(frozen=True)
class Parts:
    """What every endpoint works with: the models, the embedding service, the settings."""

    registry: ModelRegistry
    service: EmbeddingService
    settings: Settings
    # Loads on a model's first request (None: off, a model not loaded is a 409).
    first_requests: FirstRequestLoads | None = None


@dataclass(frozen=True)
class Unloaded:
    """The model a URL names (TEI's base URLs), in the repository but not loaded, where loads
    on a first request are on: whatever answers the request loads it first."""

    key: str
    message: str

    def missing(self) -> ModelNotLoaded:
        return ModelNotLoaded(self.message, key=self.key)


class Headed(Protocol):
    headers: MutableMapping[str, str]


Answered = TypeVar("Answered", bound=Headed)


async def answered_after_load(
    first_requests: FirstRequestLoads, key: str, timeout_s: float, answer: Callable[[float], Awaitable[Answered]]
) -> Answered:
    """``answer`` (given the seconds left of the deadline) once the model ``key`` is loaded
    for the request, the model held in use until it is answered; the wait in a header."""
    async with first_requests.loaded(key, timeout_s) as waited_s:
        answered = await answer(timeout_s - waited_s)
    answered.headers[LOAD_HEADER] = f"{waited_s * 1000:.2f}"
    return answered


@dataclass(frozen=True)
class Call:
    """A checked request: its model, what it asks of it (a request with texts and images
    asks twice, under one admission), and what its key is charged for."""

    model: ServedModel
    asks: tuple[Ask, ...]
    charged: Sequence[TextInput] = ()
    images: int = 0
    # What the endpoint needs again to answer (the body, a plan of its own...).
    context: Any = None


@dataclass(frozen=True)
class Answer:
    body: Any
    headers: dict[str, str]
    tokens: int = 0
    # The whole request, until its results were in.
    total_ms: float = 0.0
    # The one array the answer is, where it is one (dense embeddings): what a binary
    # answer carries (``http/responses.py``).
    array: Any = None
    # Whether the endpoint answers in binary forms at all (where it does not, a client's
    # Accept is not read: the answer is JSON).
    binary: bool = False


@dataclass(frozen=True)
class Prepared:
    """A request checked and planned, not yet charged nor admitted (when it arrived: ``started``)."""

    call: Call
    plans: list[Plan]
    started: float


@dataclass(frozen=True)
class Measure:
    """What planning a batch needs of a line's body: its model, how many texts it sends,
    and the length (characters) of its longest."""

    model: str
    texts: int
    length: int


@dataclass(frozen=True)
class Outcome:
    """What a batch job's line gave: the status and body its route would have answered."""

    status_code: int
    body: dict[str, Any]
    tokens: int = 0


class Endpoint(Generic[Body]):
    """One operation as one API asks for it (see the module's docstring)."""

    # Where a request of this API that the model's kind does not answer should go instead.
    elsewhere: ClassVar[Mapping[Output, str]] = ASKED_AT

    def __init__(self, parts: Parts):
        self.registry = parts.registry
        self.service = parts.service
        self.settings = parts.settings
        self.first_requests = parts.first_requests

    def check(self, body: Body, model: ServedModel | None) -> Call:
        """The request checked (its limits, its options, its model: ``model`` where the
        route named it, else the body's), or the domain error that refuses it."""
        raise NotImplementedError

    def respond(self, call: Call, results: list[Embeddings]) -> Any:
        """The answer's body, from each ask's result."""
        raise NotImplementedError

    def headers(self, call: Call, results: list[Embeddings], total_ms: float) -> dict[str, str]:
        """The answer's timing headers (and any of the API's own)."""
        return inference_headers(call.model.name, results[0], total_ms)

    async def __call__(self, body: Body, timeout_s: float, model: ServedModel | Unloaded | None = None) -> Answer:
        try:
            prepared = self.prepare(body, model)
        except ModelNotLoaded as missing:
            if self.first_requests is None or missing.key is None:
                raise
            # Loaded for this request (``models/first_request.py``), within its deadline.
            key = missing.key

            async def answer(timeout_s: float) -> Answer:
                named = self.model_by_key(key) if isinstance(model, Unloaded) else model
                return await self.execute(self.prepare(body, named), timeout_s)

            return await answered_after_load(self.first_requests, key, timeout_s, answer)
        return await self.execute(prepared, timeout_s)

    def prepare(self, body: Body, model: ServedModel | Unloaded | None = None) -> Prepared:
        """The request checked and planned, or the domain error that refuses it: nothing is
        charged or admitted yet (so a caller may still hand the request to another path)."""
        started = time.perf_counter()
        if isinstance(model, Unloaded):
            raise model.missing()
        call = self.check(body, model)
        # Everything the model's kind refuses is refused before the key is charged.
        return Prepared(call, [self.service.plan(call.model, ask, self.elsewhere) for ask in call.asks], started)

    async def execute(self, prepared: Prepared, timeout_s: float) -> Answer:
        """The prepared request charged to its key, admitted, run and answered."""
        call, service = prepared.call, self.service
        standing = service.charge(call.charged, call.images)
        with service.admit(call.model):
            call.model.last_used = time.monotonic()  # the memory budget unloads the least recently used
            try:
                runs = [service.run(call.model, plan, timeout_s=timeout_s) for plan in prepared.plans]
                results = await run_all(runs)
            finally:
                call.model.last_used = time.monotonic()
        total_ms = (time.perf_counter() - prepared.started) * 1000
        payload = self.respond(call, results)
        headers = {**self.headers(call, results, total_ms), **rate_limit_headers(standing)}
        tokens = sum(sum(result.token_counts) for result in results)
        return self.finished(Answer(payload, headers, tokens, total_ms, self.array_of(call, results), self.binary))

    # Endpoints whose answer may be one array set this and ``array_of``.
    binary = False

    def array_of(self, call: Call, results: list[Embeddings]) -> Any:
        """The one array the answer is, where it is one (None: the answer is JSON only)."""
        return None

    def finished(self, answer: Answer) -> Answer:
        """The answer as it leaves (an endpoint may add what only the whole request knows)."""
        return answer

    # --- a batch job's lines (they name ``/v1/`` URLs: errors in OpenAI's shape)
    body_type: ClassVar[type[BaseModel]]

    def measure(self, body: dict[str, Any]) -> Measure:
        """What planning a batch needs of a line's body (read before it is checked)."""
        raise NotImplementedError

    async def answer_lines(
        self, bodies: list[dict[str, Any]], *, may_load: bool = True, refused: EmbedgateError | None = None
    ) -> list[Outcome]:
        """Each line's outcome, in order, as the route would answer its body: the good ones
        asked of the embedding service together (``answer_bulk``: the bulk lane, no
        admission slot, no request deadline), a bad one an outcome, never an exception.
        A chunk's lines all name one model: where loads on a first request are on and it is
        in the repository but not loaded, it is loaded for them first (``may_load``), and a
        load refused is the answer of each line that names it (``refused``)."""
        outcomes: list[Outcome | None] = [None] * len(bodies)
        planned: list[tuple[int, Call]] = []
        plans: list[Plan | EmbedgateError] = []
        for row, raw in enumerate(bodies):
            try:
                call = self.check(self.body_type.model_validate(raw), None)  # type: ignore[arg-type]
                plans.append(self.service.plan(call.model, call.asks[0], self.elsewhere))
            except ModelNotLoaded as missing:
                if may_load and self.first_requests is not None and missing.key is not None:
                    return await self._answer_lines_once_loaded(missing.key, bodies)
                outcomes[row] = Outcome(*openai_error_of(refused or missing))
                continue
            except (EmbedgateError, ValidationError) as error:
                outcomes[row] = Outcome(*openai_error_of(error))
                continue
            planned.append((row, call))
        if planned:
            model = planned[0][1].model
            model.bulk_calls += 1  # a bulk job's use keeps the model from the memory budget's unloads
            try:
                results = await self.service.run_bulk_plans(model, plans)
            finally:
                model.bulk_calls -= 1
                model.last_used = time.monotonic()
            for (row, call), result in zip(planned, results):
                try:
                    if isinstance(result, EmbedgateError):
                        raise result
                    outcomes[row] = Outcome(200, self.respond(call, [result]), tokens=sum(result.token_counts))
                except EmbedgateError as error:
                    outcomes[row] = Outcome(*openai_error_of(error))
        return outcomes  # type: ignore[return-value]

    async def _answer_lines_once_loaded(self, key: str, bodies: list[dict[str, Any]]) -> list[Outcome]:
        """A chunk's lines, once their model is loaded for them (held in use until they are
        answered; the load waited for as long as a load may take)."""
        assert self.first_requests is not None
        async with contextlib.AsyncExitStack() as held:
            try:
                await held.enter_async_context(self.first_requests.loaded(key, self.settings.load_timeout_s))
            except EmbedgateError as error:
                return await self.answer_lines(bodies, may_load=False, refused=error)
            return await self.answer_lines(bodies, may_load=False)

    def model(self, name: str, pretrained: str | None = None) -> ServedModel:
        return served(self.registry, name, pretrained)

    def model_by_key(self, key: str) -> ServedModel:
        return served_by_key(self.registry, key)

    def model_named(self, key: str) -> ServedModel | Unloaded:
        """The model a URL names: the loaded one, or, where loads on a first request are on,
        one in the repository to load for the request (an error otherwise)."""
        try:
            return served_by_key(self.registry, key)
        except ModelNotLoaded as missing:
            if self.first_requests is None or missing.key is None:
                raise
            return Unloaded(missing.key, missing.message)

    async def for_model(
        self, model: ServedModel | Unloaded, timeout_s: float, answer: Callable[[ServedModel, float], Awaitable[Answered]]
    ) -> Answered:
        """``answer`` for the model a URL named (:meth:`model_named`), given the seconds left
        of the deadline: at once where it is loaded, else once it is loaded for the request."""
        if not isinstance(model, Unloaded):
            return await answer(model, timeout_s)
        assert self.first_requests is not None  # an Unloaded model is one to load on a first request
        return await answered_after_load(
            self.first_requests, model.key, timeout_s, lambda left: answer(self.model_by_key(model.key), left)
        )


def served(registry: ModelRegistry, name: str, pretrained: str | None = None) -> ServedModel:
    """The loaded model a request names (404 or 409 otherwise), tagged on the request's
    metrics: a loaded model's name is safe as a label, anything a client sent is not."""
    model = registry.served(name, pretrained)
    tag_model(model.name)
    return model


def served_by_key(registry: ModelRegistry, key: str) -> ServedModel:
    """:func:`served` for APIs that name a model with one string (OpenAI's, TEI's): a CLIP
    model is ``<model_name>:<pretrained>``, as ``/v1/models`` lists it."""
    clip = split_clip_key(key)
    return served(registry, *clip) if clip else served(registry, key)


def characters(inputs: Sequence[TextInput]) -> int:
    return sum(len(text) if isinstance(text, str) else len(text[0]) + len(text[1]) for text in inputs)
