"""An embedding ask whose inputs mix texts and images (Cohere's ``inputs``, a batch job's
line of them): its texts planned as the kind plans texts, its images through the kind's
image route, both run side by side, and the answer's rows put back in the inputs' order.

Only a kind that gives embeddings of images plans such an ask (a CLIP or a multimodal
model); the endpoints refuse images for the others before anything is planned. Images are
finished as texts are (``image_plan``: unit length, dimensions, precision).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import Field

from ...errors import InvalidInput, InvalidOption
from .asks import Ask, ImageInput, MessageInput, Output, Plan, Run, Served, joined
from .kinds.dense import dense
from .quantize import CALIBRATED
from .results import Embeddings
from .routes import route_for

# The listing field of every kind that embeds images.
IMAGE_SIZE_FIELD = (
    list[int] | None,
    Field(None, description="CLIP and multimodal models: [height, width] of the image graph's input."),
)

Planner = Callable[[Served, Ask], Plan]


def has_images(inputs: Sequence) -> bool:
    return any(isinstance(value, (ImageInput, MessageInput)) for value in inputs)


def image_source(value: ImageInput | MessageInput) -> str | bytes | MessageInput:
    """What an image route takes of an input: an image's source, or an input of parts whole."""
    return value.source if isinstance(value, ImageInput) else value


def mixed_plan(model: Served, ask: Ask, text_plan: Planner, image_plan: Planner) -> Plan:
    """``ask`` (EMBED) split: its texts through ``text_plan``, its images (``ImageInput``) and
    inputs of parts (``MessageInput``) through ``image_plan`` (an IMAGES ask of their
    sources, with the same options)."""
    model.kind.require(Output.IMAGES, model.name)
    image_rows = [row for row, value in enumerate(ask.inputs) if isinstance(value, (ImageInput, MessageInput))]
    text_rows = [row for row, value in enumerate(ask.inputs) if not isinstance(value, (ImageInput, MessageInput))]
    parts: list[tuple[list[int], Plan]] = []
    if text_rows:
        parts.append((text_rows, text_plan(model, dataclasses.replace(ask, inputs=[ask.inputs[row] for row in text_rows]))))
    sources = [image_source(ask.inputs[row]) for row in image_rows]  # type: ignore[arg-type]
    parts.append((image_rows, image_plan(model, dataclasses.replace(ask, output=Output.IMAGES, inputs=sources))))
    runs = [run for _, plan in parts for run in plan.runs]

    def finish(results: list[Embeddings]) -> Embeddings:
        answers, start = [], 0
        for _, plan in parts:
            answers.append(plan.finish(results[start : start + len(plan.runs)]))
            start += len(plan.runs)
        return interleaved(len(ask.inputs), [rows for rows, _ in parts], answers)

    return Plan(runs, finish)


def interleaved(count: int, rows: list[list[int]], answers: list[Embeddings]) -> Embeddings:
    """One answer of ``count`` inputs from each part's answer, whose rows are ``rows``."""
    first = answers[0].vectors
    vectors = np.empty((count, *first.shape[1:]), dtype=first.dtype)
    token_counts = [0] * count
    truncated_rows = [False] * count
    for part_rows, answer in zip(rows, answers):
        vectors[part_rows] = answer.vectors
        for row, tokens, cut in zip(part_rows, answer.token_counts, answer.truncated_rows or [False] * len(part_rows)):
            token_counts[row] = tokens
            truncated_rows[row] = cut
    return Embeddings(
        vectors,
        token_counts,
        sum(answer.truncated for answer in answers),
        tokenize_ms=max(answer.tokenize_ms for answer in answers),
        inference_ms=max(answer.inference_ms for answer in answers),
        queue_ms=max(answer.queue_ms for answer in answers),
        truncated_rows=truncated_rows,
        cached=sum(answer.cached for answer in answers),
    )


def image_plan(model: Served, ask: Ask) -> Plan:
    """Images (an IMAGES ask's sources) through the model's image route, then finished as
    its texts' embeddings are: unit length where asked (a model ending in Normalize already
    is), the first ``dimensions`` (``encode(truncate_dim=...)`` cuts images' too), the
    precision (not int8 or uint8: their ranges are calibrated on texts)."""
    options = ask.options
    if options.top_k is not None:
        raise InvalidOption("top_k is for sparse encoders", "top_k")
    if options.precision in CALIBRATED:
        raise InvalidInput(
            f"{options.precision} needs ranges calibrated at conversion, which image embeddings do not have; "
            "use float32, binary or ubinary"
        )
    dimensions, full = options.dimensions, model.metadata.embedding_dim
    if dimensions is not None and dimensions > full:
        raise InvalidOption(f"dimensions must be at most {full} for model '{model.name}'", "dimensions")
    shortened = dimensions if dimensions is not None and dimensions < full else None
    route = route_for(model.routes, None, model.name, images=True)

    def finish(results: list[Embeddings]) -> Embeddings:
        vectors = dense(
            model, results[0].vectors, normalize=options.normalize, precision=options.precision, dimensions=shortened
        )
        return joined(results, vectors)

    return Plan([Run(route, ask.inputs)], finish)
