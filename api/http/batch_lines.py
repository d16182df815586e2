"""A batch job's lines, answered as their routes answer them: ``/v1/embeddings`` and
``/v1/rerank``.

Each line is checked as a request would be (its body against the route's schema, its model,
its limits): a bad one gets the error body the route would send (in OpenAI's shape, as on
every ``/v1/`` route), and goes to the batch's error file. The good ones are asked of the
embedding service together (``answer_bulk``: the same plans as online requests, their texts
through the bulk lane, sorted by length); each line's answer is then built by the route's
own code.
"""

from __future__ import annotations

import abc
from typing import Any

from pydantic import BaseModel, ValidationError

from ..compute.requests.asks import Ask
from ..compute.requests.results import Embeddings
from ..compute.requests.served import ServedModel
from ..compute.service import EmbeddingService
from ..errors import EmbedgateError
from ..jobs.chunks import Measure
from ..jobs.lines import RequestLine
from ..jobs.runner import Outcome
from ..models.names import split_clip_key
from ..models.registry import ModelRegistry
from ..settings import Settings
from .errors import openai_error_of
from .openai import embeddings
from .openai.schemas import EmbeddingsRequest
from .paths import rerank
from .rerank_schemas import RerankRequest


class _Lines(abc.ABC):
    """What each endpoint's lines need: the models, the embedding service, the limits. A
    chunk's lines all name one model (chunks are cut per model)."""

    url: str

    def __init__(self, registry: ModelRegistry, service: EmbeddingService, settings: Settings):
        self.registry = registry
        self.service = service
        self.settings = settings

    @abc.abstractmethod
    def checked(self, body: dict[str, Any]) -> tuple[ServedModel, Any, Ask]:
        """A line's model, its request (checked as the route checks it) and what it asks."""

    @abc.abstractmethod
    def respond(self, model: ServedModel, request: Any, result: Embeddings) -> dict[str, Any]:
        """The route's answer to a line."""

    async def run(self, model: str, requests: list[RequestLine]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(requests)
        planned: list[tuple[int, Any, Ask]] = []
        served: ServedModel | None = None
        for row, request in enumerate(requests):
            try:
                served, checked, ask = self.checked(request.body)
            except (EmbedgateError, ValidationError) as error:
                outcomes[row] = Outcome(*openai_error_of(error))
                continue
            planned.append((row, checked, ask))
        if planned:
            assert served is not None
            answers = await self.service.answer_bulk(served, [ask for _, _, ask in planned])
            for (row, checked, _), result in zip(planned, answers):
                if isinstance(result, EmbedgateError):
                    outcomes[row] = Outcome(*openai_error_of(result))
                else:
                    outcomes[row] = Outcome(200, self.respond(served, checked, result), tokens=sum(result.token_counts))
        return outcomes  # type: ignore[return-value]


def _named(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    return value if isinstance(value, str) else ""


class EmbeddingsLines(_Lines):
    url = "/v1/embeddings"

    def measure(self, body: dict[str, Any]) -> Measure:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, list) else []
        lengths = [len(text) for text in texts if isinstance(text, str)]
        return Measure(_named(body, "model"), len(texts), max(lengths, default=0))

    def checked(self, body: dict[str, Any]) -> tuple[ServedModel, Any, Ask]:
        request = EmbeddingsRequest.model_validate(body)
        clip = split_clip_key(request.model)
        served = self.registry.served(*clip) if clip else self.registry.served(request.model)
        plan = embeddings.check(request, served, self.settings.max_texts_per_request)
        return served, plan, embeddings.ask(plan)

    def respond(self, model: ServedModel, request: embeddings.Plan, result: Embeddings) -> dict[str, Any]:
        return embeddings.answer(request, result.vectors, result.token_counts)


class RerankLines(_Lines):
    url = "/v1/rerank"

    def measure(self, body: dict[str, Any]) -> Measure:
        query, documents = body.get("query"), body.get("documents")
        documents = documents if isinstance(documents, list) else []
        lengths = [len(d if isinstance(d, str) else str(d)) for d in documents]
        query_length = len(query) if isinstance(query, str) else 0
        return Measure(_named(body, "model"), len(documents), query_length + max(lengths, default=0))

    def checked(self, body: dict[str, Any]) -> tuple[ServedModel, BaseModel, Ask]:
        request = RerankRequest.model_validate(body)
        rerank.check(request, self.settings.max_texts_per_request)
        return self.registry.served(request.model), request, rerank.ask(request)

    def respond(self, model: ServedModel, request: RerankRequest, result: Embeddings) -> dict[str, Any]:
        return rerank.answer(request, model.name, result.vectors, result.token_counts)
