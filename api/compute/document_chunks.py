"""A plan whose texts are cut into chunks (``requests/chunking.py``) becomes the plan of its
chunks' texts, whose answer says which chunks they are: the same runs, the same prompt and
options, online or in the bulk lane. A plan of late chunks (``requests/late_chunking.py``)
runs its texts' rows through the model's late-chunking graph instead, its answer made by
the same plan. The cutting runs in the tokenizer pool."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable

import numpy as np

from embedgate.contract.preprocess.prompted import PromptedText
from embedgate.contract.preprocess.text import TextTokenizer

from ..errors import EmbedgateError, InvalidOption
from .requests.asks import Ask, Output, Plan, Run
from .requests.chunking import Chunking, chunk_texts
from .requests.late_chunking import LateLayout, batches, late_layout
from .requests.results import Embeddings
from .requests.served import ServedModel
from .scheduling.threads import OffLoopThreads


def chunked_plan(model: ServedModel, ask: Ask, plan: Plan) -> Plan:
    """``plan`` marked to cut its texts into chunks where ``ask`` asks for them: dense
    embeddings of texts through one route with a text tokenizer (late chunks: of a model
    with a late-chunking graph), else refused."""
    if ask.chunking is None:
        return plan
    if ask.output is not Output.EMBED or len(plan.runs) != 1 or not isinstance(plan.runs[0].route.tokenizer, TextTokenizer):
        raise InvalidOption(
            f"chunking is for dense embeddings of texts; model '{model.name}' is {model.kind.title}", "chunking"
        )
    if ask.chunking.late:
        model.kind.late_part(model.name, model.triton_name)  # refused where the model has none
    return dataclasses.replace(plan, chunking=ask.chunking)


def chunk_source(run: Run) -> tuple[list[str], str, bool]:
    """A chunked run's texts, their prompt, and whether the prompt is kept apart (a model
    that pools a text without its prompt's tokens: ``PromptedText``)."""
    if run.inputs and isinstance(run.inputs[0], PromptedText):
        return [item.text for item in run.inputs], run.inputs[0].prompt, True  # type: ignore[union-attr]
    return [text for text in run.inputs if isinstance(text, str)], run.prefix, False


async def expanded(pool: OffLoopThreads, model: ServedModel, plan: Plan, max_chunks: int) -> Plan:
    """A chunked plan as the plan of its chunks' texts (any other as it is)."""
    if plan.chunking is None:
        return plan
    (run,) = plan.runs
    texts, prefix, apart = chunk_source(run)
    chunks = await pool.run(
        chunk_texts, run.route.tokenizer, texts, plan.chunking, prefix, model.metadata.max_seq_length, max_chunks
    )
    parts = [text[chunk.start : chunk.end] for text, mine in zip(texts, chunks) for chunk in mine]
    inputs = [PromptedText(prefix, part) for part in parts] if apart else parts

    def finish(results: list[Embeddings]) -> Embeddings:
        return dataclasses.replace(plan.finish(results), chunks=chunks)

    return Plan([dataclasses.replace(run, inputs=inputs)], finish)


def _laid_out(
    tokenizer, texts: list[str], chunking: Chunking, prefix: str, max_length: int, max_chunks: int, max_rows: int
) -> tuple[LateLayout, list[tuple[list[int], dict[str, np.ndarray]]]]:
    """The texts' rows and their calls (in the pool: tokenizing, cutting and the inputs alike)."""
    layout = late_layout(tokenizer, texts, chunking, prefix, max_length, max_chunks)
    return layout, batches(layout, max_rows)


async def laid_out(
    pool: OffLoopThreads, model: ServedModel, plan: Plan, max_chunks: int
) -> tuple[list[str], LateLayout, list[tuple[list[int], dict[str, np.ndarray]]]]:
    """A plan of late chunks: its texts, their rows through the late-chunking graph, and the
    rows' calls (at most ``max_batch_size`` rows each, with their inputs), made in the pool."""
    (run,) = plan.runs
    texts, prefix, _ = chunk_source(run)
    assert plan.chunking is not None
    layout, calls = await pool.run(
        _laid_out, run.route.tokenizer, texts, plan.chunking, prefix, model.metadata.max_seq_length, max_chunks,
        model.metadata.max_batch_size,
    )
    return texts, layout, calls


async def late_answer(
    plan: Plan, layout: LateLayout, calls: list[tuple[list[int], dict[str, np.ndarray]]],
    send: Callable[[list[dict[str, np.ndarray]]], Awaitable[list[np.ndarray]]], began: float,
) -> Embeddings:
    """The answer of a plan of late chunks: its rows' ``calls`` sent (``send``: each call's
    output), each chunk's vector taken from its row's, then the plan's finish (unit length,
    dimensions, precision). Its usage counts each row's tokens once."""
    outputs: list[np.ndarray] = [np.empty(0)] * len(layout.rows)
    sent = time.perf_counter()
    for (rows, _), output in zip(calls, await send([inputs for _, inputs in calls])):
        for row, values in zip(rows, output):
            outputs[row] = values
    result = Embeddings(
        layout.gather(outputs), layout.row_tokens(), 0,
        tokenize_ms=(sent - began) * 1000, inference_ms=(time.perf_counter() - sent) * 1000,
    )
    return dataclasses.replace(plan.finish([result]), chunks=layout.chunks)


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
