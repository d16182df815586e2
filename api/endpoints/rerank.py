"""Reranking: a relevance score for a query and each document, best first: a
cross-encoder's, as ``CrossEncoder.rank`` orders them, or a multi-vector model's MaxSim of
the query's token vectors against each document's. ``/rerank`` and ``/v1/rerank`` (and a
batch job's ``/v1/rerank`` lines) in the shape rerank APIs share; TEI's ``/rerank`` in
TEI's, its scores TEI's probabilities unless it asks for the raw ones."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..compute.requests.asks import Ask, Options, Output, Scores
from ..compute.requests.prompts import PromptChoice
from ..compute.requests.results import Embeddings
from ..compute.requests.served import ServedModel
from ..errors import Empty, InvalidInput, TooManyInputs
from .envelope import Call, Endpoint, Measure
from .schemas.rerank import RerankRequest
from .schemas.tei import TeiRerankRequest
from .tei import TeiEndpoint


def best_first(scores: np.ndarray) -> np.ndarray:
    """The documents' order by their scores ([documents, 1]), best first (equal scores keep
    the documents' order)."""
    return np.argsort(-scores[:, 0], kind="stable")


class Rerank(Endpoint[RerankRequest]):
    """``POST /rerank``, ``/v1/rerank`` and a batch job's ``/v1/rerank`` lines."""

    body_type = RerankRequest

    def check(self, body: RerankRequest, model: ServedModel | None) -> Call:
        if not body.documents:
            raise InvalidInput("documents must be a non-empty list")
        if body.prompt_name is not None and body.prompt is not None:
            raise InvalidInput("give prompt_name or prompt, not both")
        limit = self.settings.max_texts_per_request
        if len(body.documents) > limit:
            raise TooManyInputs(f"{len(body.documents)} documents in one request; the limit is {limit}")
        model = self.model(body.model)
        prompt = PromptChoice(prompt_name=body.prompt_name, prompt=body.prompt)
        ask = Ask(Output.RERANK, body.documents, prompt, query=body.query)
        pairs = [(body.query, document) for document in body.documents]
        return Call(model, (ask,), pairs, context=body)

    def respond(self, call: Call, results: list[Embeddings]) -> dict[str, Any]:
        body: RerankRequest = call.context
        scores = results[0].vectors
        order = best_first(scores)[: body.top_n]
        ranked = [
            {
                "index": int(index),
                "relevance_score": float(scores[index, 0]),
                **({"document": {"text": body.documents[index]}} if body.return_documents else {}),
            }
            for index in order
        ]
        return {"model": call.model.name, "results": ranked, "usage": {"total_tokens": sum(results[0].token_counts)}}

    def measure(self, body: dict[str, Any]) -> Measure:
        query, documents, model = body.get("query"), body.get("documents"), body.get("model")
        documents = documents if isinstance(documents, list) else []
        lengths = [len(d if isinstance(d, str) else str(d)) for d in documents]
        query_length = len(query) if isinstance(query, str) else 0
        return Measure(model if isinstance(model, str) else "", len(documents), query_length + max(lengths, default=0))


class TeiRerank(TeiEndpoint[TeiRerankRequest]):
    """TEI's ``/rerank``: every text's score, best first."""

    def check(self, body: TeiRerankRequest, model: ServedModel | None) -> Call:
        assert model is not None
        if not body.texts:
            raise Empty("`texts` cannot be empty")
        self.limit(len(body.texts))
        scores = Scores.RAW if body.raw_scores else Scores.PROBABILITIES
        ask = Ask(Output.RERANK, body.texts, options=Options(scores=scores), query=body.query)
        return Call(model, (ask,), [(body.query, text) for text in body.texts], context=body)

    def answer(self, call: Call, result: Embeddings) -> Any:
        body: TeiRerankRequest = call.context
        scores = result.vectors
        if not body.return_text:
            return [{"index": int(index), "score": float(scores[index, 0])} for index in best_first(scores)]
        return [
            {"index": int(index), "score": float(scores[index, 0]), "text": body.texts[index]}
            for index in best_first(scores)
        ]
