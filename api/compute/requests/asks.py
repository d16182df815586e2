"""What a request asks of a model, and the plan its kind makes of it.

An :class:`Ask` is what the HTTP side hands the embedding service: what it wants out (an
:class:`Output`), its texts (or a rerank's documents, or a classifier's texts and
pairs), the prompt and task it chose and its options. The model's kind turns it into a
:class:`Plan`: the texts each of its routes runs (with their prompt), and how the routes'
outputs become the answer. Each run goes through its route's step (``steps.py``), or one
of its own. The service runs any plan the same way, online or in the bulk lane
(``compute/bulk_lane.py``), so the sequence kind check -> prompt -> run -> post-process is
written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import numpy as np

from embedgate.contract.spec import ModelMetadata

from .chunking import Chunking
from .prompts import DEFAULT, PromptChoice, prompt_for
from .quantize import Precision
from .results import Embeddings
from .routes import Route, route_for
from .steps import Step


class Served(Protocol):
    """A loaded model as a kind's plan sees it (``served.ServedModel``)."""

    name: str
    triton_name: str
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
ASKED_AT: dict[Output, str] = {
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
    """Inputs through one route, each with ``prefix`` (the prompt) before it, by the route's
    step or, where the run has one, by its own (``own_step``: a dense model's late chunks)."""

    route: Route
    inputs: list[TextInput]
    prefix: str = ""
    own_step: Step | None = None

    @property
    def step(self) -> Step:
        return self.route.step if self.own_step is None else self.own_step


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
