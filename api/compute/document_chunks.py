"""A plan whose texts are cut into chunks (``requests/chunking.py``) becomes the plan of its
chunks' texts, whose answer says which chunks they are: the same runs, the same prompt and
options, online or in the bulk lane. The cutting runs in the tokenizer pool."""

from __future__ import annotations

import dataclasses

from embedgate.contract.preprocess.text import TextTokenizer

from ..errors import EmbedgateError, InvalidOption
from .requests.asks import Ask, Output, Plan
from .requests.chunking import chunk_texts
from .requests.results import Embeddings
from .requests.served import ServedModel
from .scheduling.threads import OffLoopThreads


def chunked_plan(model: ServedModel, ask: Ask, plan: Plan) -> Plan:
    """``plan`` marked to cut its texts into chunks where ``ask`` asks for them: dense
    embeddings of texts through one route with a text tokenizer, else refused."""
    if ask.chunking is None:
        return plan
    if ask.output is not Output.EMBED or len(plan.runs) != 1 or not isinstance(plan.runs[0].route.tokenizer, TextTokenizer):
        raise InvalidOption(
            f"chunking is for dense embeddings of texts; model '{model.name}' is {model.kind.title}", "chunking"
        )
    return dataclasses.replace(plan, chunking=ask.chunking)


async def expanded(pool: OffLoopThreads, model: ServedModel, plan: Plan, max_chunks: int) -> Plan:
    """A chunked plan as the plan of its chunks' texts (any other as it is)."""
    if plan.chunking is None:
        return plan
    (run,) = plan.runs
    texts = [text for text in run.inputs if isinstance(text, str)]
    chunks = await pool.run(
        chunk_texts, run.route.tokenizer, texts, plan.chunking, run.prefix, model.metadata.max_seq_length, max_chunks
    )
    parts = [text[chunk.start : chunk.end] for text, mine in zip(texts, chunks) for chunk in mine]

    def finish(results: list[Embeddings]) -> Embeddings:
        return dataclasses.replace(plan.finish(results), chunks=chunks)

    return Plan([dataclasses.replace(run, inputs=parts)], finish)


async def expanded_or_error(
    pool: OffLoopThreads, model: ServedModel, plan: Plan | EmbedgateError, max_chunks: int
) -> Plan | EmbedgateError:
    """:func:`expanded` for a batch job's line: its refusal is its own outcome."""
    if not isinstance(plan, Plan):
        return plan
    try:
        return await expanded(pool, model, plan, max_chunks)
    except EmbedgateError as error:
        return error
