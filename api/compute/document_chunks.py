"""A plan whose texts are cut into chunks (``requests/chunking.py``, planned by the kind)
becomes the plan of its chunks' texts, whose answer says which chunks they are: the same
runs, the same prompt and options, online or in the bulk lane. The cutting runs in the
tokenizer pool, and the request is charged for the tokens the chunks' overlap repeats."""

from __future__ import annotations

import dataclasses

from embedgate.contract.preprocess.prompted import PromptedText

from ..errors import EmbedgateError
from .engine import ComputeEngine
from .requests.asks import Plan
from .requests.chunking import chunk_source, chunk_texts
from .requests.costs import items_cost
from .requests.results import Embeddings
from .requests.served import ServedModel


async def expanded(engine: ComputeEngine, model: ServedModel, plan: Plan) -> Plan:
    """A chunked plan as the plan of its chunks' texts (any other as it is)."""
    if plan.chunking is None:
        return plan
    (run,) = plan.runs
    texts, prefix, apart = chunk_source(run.inputs, run.prefix)
    chunks = await engine.in_pool(
        chunk_texts, run.route.tokenizer, texts, plan.chunking, prefix, model.metadata.max_seq_length,
        engine.max_chunks,
    )
    parts = [text[chunk.start : chunk.end] for text, mine in zip(texts, chunks) for chunk in mine]
    inputs = [PromptedText(prefix, part) for part in parts] if apart else parts
    # Charged for its texts when it came in; the chunks' overlap repeats some: charged now.
    engine.charge_more(items_cost(inputs) - items_cost(run.inputs))

    def finish(results: list[Embeddings]) -> Embeddings:
        return dataclasses.replace(plan.finish(results), chunks=chunks)

    return Plan([dataclasses.replace(run, inputs=inputs)], finish)


async def expanded_or_error(engine: ComputeEngine, model: ServedModel, plan: Plan | EmbedgateError) -> Plan | EmbedgateError:
    """:func:`expanded` for a batch job's line: its refusal is its own outcome."""
    if not isinstance(plan, Plan):
        return plan
    try:
        return await expanded(engine, model, plan)
    except EmbedgateError as error:
        return error
