"""A multi-vector (late-interaction, ColBERT-style) model: a vector per token of each text,
as ``MultiVectorEncoder.encode_query`` / ``encode_document`` / ``encode`` give them, and
reranking by MaxSim of the query's vectors against each document's (``late_interaction.py``).

Its one graph gives a vector per position; each task tokenizes and keeps tokens its own way
(a query expanded with ``[MASK]`` tokens, a document without its skiplist's tokens), so each
task is a route of its own (``preprocess/multi_vector.py``), with its own calls and cache rows."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field

from embedgate.contract.kinds.multi_vector import KIND, MultiVectorInfo, MultiVectorTask
from embedgate.contract.preprocess.multi_vector import MultiVectorTokenizer
from embedgate.contract.preprocess.text import TokenBatch
from embedgate.contract.spec import INPUT_IDS, TOKEN_EMBEDDINGS

from ....errors import WrongModelKind
from ..asks import Ask, Output, Plan, Served, joined, text_run
from ..late_interaction import maxsim, token_rows
from ..late_interaction import normalized as _unit
from ..prompts import PromptChoice
from ..routes import DEFAULT_TASK, Route
from .base import Files, ServedKind


class MultiVectorKind(ServedKind):
    name = KIND.name
    title = "a multi-vector encoder (a vector per token, late interaction)"
    outputs = frozenset({Output.MULTI_VECTOR, Output.RERANK})
    text_output = Output.MULTI_VECTOR
    pooling = "none"
    output = TOKEN_EMBEDDINGS
    listing_fields = {
        "similarity": (
            str | None,
            Field(None, description="Multi-vector models: how /rerank scores a document ('maxsim', 'meanmaxsim')."),
        ),
        "query_tokens": (
            int | None,
            Field(None, description="Multi-vector models: the tokens a query is expanded to (none: not expanded)."),
        ),
    }

    def _tasks(self) -> dict[str, MultiVectorTask]:
        info = self.metadata.record_of(MultiVectorInfo)
        assert info is not None
        return {DEFAULT_TASK: info.default, "query": info.query, "document": info.document}

    def routes(self, files: Files, triton_name: str) -> list[Route]:
        tokenizer_file = self.tokenizer_file(files, triton_name)
        strip = self.metadata.strip_whitespace
        routes = []
        for task, info in self._tasks().items():
            tokenizer = MultiVectorTokenizer(tokenizer_file, info, strip)
            routes.append(Route("" if task == DEFAULT_TASK else task, (task,), tokenizer, triton_name))
        return routes

    def rows(self, batch: TokenBatch, rows: np.ndarray | slice, outputs: np.ndarray) -> np.ndarray:
        assert batch.scored is not None
        return token_rows(outputs, batch.scored[rows])

    def noop_output(self, tensors: dict[str, np.ndarray]) -> np.ndarray:
        return np.zeros(tensors[INPUT_IDS].shape + (self.metadata.embedding_dim,), dtype=np.float32)

    def plan(self, model: Served, ask: Ask) -> Plan:
        options = ask.options
        if options.precision != "float32":
            raise WrongModelKind("precision is for dense embeddings; token vectors come as floats")
        if options.top_k is not None:
            raise WrongModelKind("top_k is for sparse encoders")
        unit = options.normalize and not self.metadata.normalized
        if ask.output is Output.MULTI_VECTOR:
            run = text_run(model, ask.inputs, ask.prompt)

            def vectors(results):
                return joined(results, _unit(results[0].vectors) if unit else results[0].vectors)

            return Plan([run], vectors)
        # Rerank: the query as encode_query sees it (its prompt, as asked), the documents as
        # encode_document does; then MaxSim, as the model's similarity says.
        query = text_run(model, [ask.query or ""], _as_query(ask.prompt))
        documents = text_run(model, ask.inputs, PromptChoice(task="document"))
        mean = self._similarity() == "meanmaxsim"

        def finish(results):
            scores = maxsim(results[0].vectors[0], results[1].vectors, mean=mean)
            return joined(results, scores.reshape(-1, 1))

        return Plan([query, documents], finish)

    def _similarity(self) -> str:
        info = self.metadata.record_of(MultiVectorInfo)
        return info.similarity if info is not None else "maxsim"

    def listing(self) -> dict[str, Any]:
        info = self.metadata.record_of(MultiVectorInfo)
        expansion = info.query.expansion if info is not None else None
        return {"similarity": self._similarity(), "query_tokens": expansion.length if expansion else None}


def _as_query(choice: PromptChoice) -> PromptChoice:
    """A rerank's prompt choice for its query: the query task, the prompt it named kept."""
    return PromptChoice(prompt_name=choice.prompt_name, prompt=choice.prompt, task="query")
