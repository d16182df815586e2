"""A batch job's lines, answered as their routes answer them: ``/v1/embeddings`` and
``/v1/rerank``.

Each line is checked as a request would be (its body against the route's schema, its model,
its limits): a bad one gets the error body the route would send (in OpenAI's shape, as on
every ``/v1/`` route), and goes to the batch's error file. The good ones' texts (or pairs),
each with the prompt it chooses, run together through the embedding service's bulk lane,
sorted by length; each line's answer is then built by the route's own code.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..compute.embedding import EmbeddingService, dense
from ..compute.kinds import Task
from ..compute.prompts import PromptChoice, prompt_for
from ..compute.served import ServedModel
from ..errors import EmbedgateError
from ..jobs.chunks import Measure
from ..jobs.lines import RequestLine
from ..jobs.worker import Outcome
from ..models.names import split_clip_key
from ..models.registry import ModelRegistry
from ..settings import Settings
from .errors import openai_error_of
from .openai import embeddings
from .openai.schemas import EmbeddingsRequest
from .rerank_schemas import RerankRequest
from .routes import rerank


class _Lines:
    """What each endpoint's lines need: the models, the embedding service, the limits. A
    chunk's lines all name one model (chunks are cut per model)."""

    def __init__(self, registry: ModelRegistry, service: EmbeddingService, settings: Settings):
        self.registry = registry
        self.service = service
        self.settings = settings


class EmbeddingsLines(_Lines):
    url = "/v1/embeddings"

    def measure(self, body: dict[str, Any]) -> Measure:
        model = body.get("model")
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else inputs if isinstance(inputs, list) else []
        lengths = [len(text) for text in texts if isinstance(text, str)]
        return Measure(model if isinstance(model, str) else "", len(texts), max(lengths, default=0))

    def _model(self, name: str) -> ServedModel:
        clip = split_clip_key(name)
        return self.registry.served(*clip) if clip else self.registry.served(name)

    async def run(self, model: str, requests: list[RequestLine]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(requests)
        planned: list[tuple[int, embeddings.Plan, str]] = []
        served: ServedModel | None = None
        for row, request in enumerate(requests):
            try:
                body = EmbeddingsRequest.model_validate(request.body)
                served = self._model(body.model)
                plan = embeddings.check(body, served, self.settings.max_texts_per_request)
                prefix = prompt_for(served.name, served.metadata, PromptChoice(input_type=body.input_type))
            except (EmbedgateError, ValidationError) as error:
                outcomes[row] = Outcome(*openai_error_of(error))
                continue
            planned.append((row, plan, prefix))
        if planned:
            assert served is not None
            texts = [prefix + text for _, plan, prefix in planned for text in plan.request.input]
            result = await self.service.run_bulk(served, texts)
            start = 0
            for row, plan, _ in planned:
                rows = slice(start, start + len(plan.request.input))
                start = rows.stop
                counts = result.token_counts[rows]
                try:
                    vectors = dense(served, result.vectors[rows], normalize=True, precision=plan.service_precision)
                except EmbedgateError as error:
                    outcomes[row] = Outcome(*openai_error_of(error))
                    continue
                outcomes[row] = Outcome(200, embeddings.answer(plan, vectors, counts), tokens=sum(counts))
        return outcomes  # type: ignore[return-value]


class RerankLines(_Lines):
    url = "/v1/rerank"

    def measure(self, body: dict[str, Any]) -> Measure:
        model, query, documents = body.get("model"), body.get("query"), body.get("documents")
        documents = documents if isinstance(documents, list) else []
        lengths = [len(d if isinstance(d, str) else str(d)) for d in documents]
        query_length = len(query) if isinstance(query, str) else 0
        return Measure(model if isinstance(model, str) else "", len(documents), query_length + max(lengths, default=0))

    async def run(self, model: str, requests: list[RequestLine]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(requests)
        planned: list[tuple[int, RerankRequest, str]] = []
        served: ServedModel | None = None
        for row, request in enumerate(requests):
            try:
                body = RerankRequest.model_validate(request.body)
                rerank.check(body, self.settings.max_texts_per_request)
                served = self.registry.served(body.model)
                served.kind.require(Task.RERANK, served.name)
                choice = PromptChoice(prompt_name=body.prompt_name, prompt=body.prompt)
                query = prompt_for(served.name, served.metadata, choice) + body.query
            except (EmbedgateError, ValidationError) as error:
                outcomes[row] = Outcome(*openai_error_of(error))
                continue
            planned.append((row, body, query))
        if planned:
            assert served is not None
            pairs = [(query, document) for _, body, query in planned for document in body.documents]
            result = await self.service.run_bulk(served, pairs)
            start = 0
            for row, body, _ in planned:
                rows = slice(start, start + len(body.documents))
                start = rows.stop
                counts = result.token_counts[rows]
                answer = rerank.answer(body, served.name, result.vectors[rows], counts)
                outcomes[row] = Outcome(200, answer, tokens=sum(counts))
        return outcomes  # type: ignore[return-value]
