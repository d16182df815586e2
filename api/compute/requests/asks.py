"""What a request asks of a model, and the plan its kind makes of it.

An :class:`Ask` is what the HTTP side hands the embedding service: what it wants out (an
:class:`Output`), its texts (or a rerank's documents, or a classifier's texts and
pairs), the prompt and task it chose and its options. The model's kind turns it into a
:class:`Plan`: the texts each of its routes runs (with their prompt), and how the routes'
outputs become the answer. The service runs any plan the same way, online or in the bulk
lane, so the sequence kind check -> prompt -> run -> post-process is written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import numpy as np

from embedgate.contract.spec import ModelMetadata

from ...errors import EmbedgateError
from .chunking import Chunking
from .prompts import DEFAULT, PromptChoice, prompt_for
from .quantize import Precision
from .results import Embeddings
from .routes import Route, route_for


class Served(Protocol):
    """A loaded model as a kind's plan sees it (``served.ServedModel``)."""

    name: str
    metadata: ModelMetadata
    routes: list[Route]
    kind: Any  # ServedKind


# A text input: a text, or a (query, document) pair.
TextInput = str | tuple[str, str]


@dataclass(frozen=True)
class ImageInput:
    """An image among an embedding ask's texts (Cohere's inputs, a batch line of them): an
    http(s) URL, a data URI or uploaded bytes, as an image route takes it. Only a kind that
    gives embeddings of images plans an ask that holds one (``media.py``)."""

    source: str | bytes


@dataclass(frozen=True)
class MessageInput:
    """An input of several parts embedded together (Cohere's input of a text and an image):
    texts and images in their order, as one message through a vision-language model's chat
    template. Only a kind that joins parts plans one (``ServedKind.joins_parts``)."""

    parts: tuple[str | ImageInput, ...]


class Output(Enum):
    """What a request asks a model for."""

    EMBED = "dense embeddings of texts"
    SPARSE = "sparse embeddings of texts"
    MULTI_VECTOR = "a vector per token of texts"
    RERANK = "relevance scores of (query, document) pairs"
    PREDICT = "label scores of texts or text pairs"
    IMAGES = "embeddings of images"


# Where each output is asked for, to point a request at the right endpoint.
ENDPOINTS: dict[Output, str] = {
    Output.EMBED: "POST /infer or /v1/embeddings",
    Output.SPARSE: "POST /infer (sparse_embeddings)",
    Output.MULTI_VECTOR: "POST /infer (multi_vector_embeddings)",
    Output.RERANK: "POST /rerank or /v1/rerank",
    Output.PREDICT: "POST /predict",
    Output.IMAGES: "POST /infer, /infer_image or /v2/embed with a CLIP or multimodal model",
}


class Scores(Enum):
    """Which scores a cross-encoder's request wants."""

    MODEL = "with the model's activation, as CrossEncoder.predict gives them"
    RAW = "the logits, before any activation"
    # TEI's: a softmax over the labels (a sigmoid for one), whatever the model's activation.
    PROBABILITIES = "probabilities: a softmax over the labels, a sigmoid for one"


@dataclass(frozen=True)
class Options:
    """How a request wants its output (each kind refuses the options that mean nothing to it)."""

    normalize: bool = True
    # Whether the request set ``normalize`` itself (a kind that cannot may refuse only then).
    normalize_given: bool = False
    precision: Precision = "float32"
    # Dense embeddings: the first ``dimensions`` of each vector (unit length again where
    # asked), as ``encode(truncate_dim=...)`` gives them.
    dimensions: int | None = None
    top_k: int | None = None
    scores: Scores = Scores.MODEL


@dataclass(frozen=True)
class Ask:
    output: Output
    # Texts (EMBED, SPARSE, MULTI_VECTOR; EMBED also images among them: ImageInput),
    # documents (RERANK), texts or pairs (PREDICT), image sources (IMAGES).
    inputs: list[TextInput]
    prompt: PromptChoice = DEFAULT
    options: Options = Options()
    # RERANK: the query the documents are scored against.
    query: str | None = None
    # EMBED: each text cut into chunks, each embedded (``chunking.py``).
    chunking: Chunking | None = None


@dataclass(frozen=True)
class Run:
    """Inputs through one route, each with ``prefix`` (the prompt) before it."""

    route: Route
    inputs: list[TextInput]
    prefix: str = ""


@dataclass(frozen=True)
class Plan:
    runs: list[Run]
    # The runs' outputs (in order) -> the answer.
    finish: Callable[[list[Embeddings]], Embeddings] = field(default=lambda results: results[0])
    # Its one run's texts are cut into chunks first, and the chunks run instead.
    chunking: Chunking | None = None


def joined(results: list[Embeddings], vectors: np.ndarray) -> Embeddings:
    """One answer of several runs' outputs: ``vectors``, every run's tokens, the slowest
    run's times (they ran side by side)."""
    if len(results) == 1:
        return dataclasses.replace(results[0], vectors=vectors)
    return Embeddings(
        vectors,
        [count for result in results for count in result.token_counts],
        sum(result.truncated for result in results),
        tokenize_ms=max(result.tokenize_ms for result in results),
        inference_ms=max(result.inference_ms for result in results),
        queue_ms=max(result.queue_ms for result in results),
        cached=sum(result.cached for result in results),
    )


def text_run(model: Served, inputs: list[TextInput], choice: PromptChoice) -> Run:
    """``inputs`` through the route ``choice``'s task takes, each with the prompt it chooses."""
    route = route_for(model.routes, choice.route_task, model.name)
    return Run(route, inputs, prompt_for(model.name, model.metadata, choice))


def prefixed(prefix: str, inputs: list[TextInput]) -> list[TextInput]:
    """Each text with ``prefix`` before it (a pair's prompt is already in its first text:
    the kind's plan puts it there)."""
    return [prefix + text for text in inputs] if prefix else inputs  # type: ignore[operator]


class Gathered:
    """Several requests' plans (or their errors) for one bulk call per route: every run's
    inputs, prompts in them, in one list per route, and where each run's are in it. An
    image route's inputs are each request's own call: an image that cannot be used is the
    error of the request that sent it, not of the others; its prompt (which a
    vision-language model renders with each image) is kept beside them (``prompts``)."""

    def __init__(self, plans: list[Plan | EmbedgateError]):
        self.plans = plans
        # A key per route (per route, plan and run for images) -> (route, its inputs); each
        # plan's runs as (key, start, stop).
        self.routes: dict[Hashable, tuple[Route, list[TextInput]]] = {}
        self.prompts: dict[Hashable, str] = {}
        self.spans: list[list[tuple[Hashable, int, int]]] = []
        for index, plan in enumerate(plans):
            mine = []
            for number, run in enumerate(plan.runs if isinstance(plan, Plan) else ()):
                images = run.route.images is not None
                key = (id(run.route), index, number) if images else id(run.route)
                route, inputs = self.routes.setdefault(key, (run.route, []))
                mine.append((key, len(inputs), len(inputs) + len(run.inputs)))
                if images:
                    self.prompts[key] = run.prefix
                    inputs.extend(run.inputs)
                else:
                    inputs.extend(prefixed(run.prefix, run.inputs))
            self.spans.append(mine)

    def finished(self, outputs: dict[Hashable, Embeddings | EmbedgateError]) -> list[Embeddings | EmbedgateError]:
        """Each plan's answer from the routes' ``outputs`` (or its error: its own, or that of
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
                answers.append(plan.finish([outputs[key].rows(start, stop) for key, start, stop in mine]))  # type: ignore[union-attr]
            except EmbedgateError as error:
                answers.append(error)
        return answers
