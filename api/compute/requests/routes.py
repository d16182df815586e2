"""A served model's routes: what a request's texts go through, chosen by its task.

sentence-transformers encodes with a task: ``encode_query`` "query", ``encode_document``
"document", ``encode`` none (the default). Where a model's modules differ by task (a
``Router``: asymmetric heads, inference-free sparse models), each route is a graph of its
own (a Triton version of the model) or, for static weights, computed by the gateway (a
static embedding model's one route is); a multi-vector model tokenizes and scores each
task's texts in its own way. A route has its own tokenizer, its own calls to Triton and its
own rows in the response cache, so no text is ever answered by another route's modules. A
model without routes has one, for every task.
A model that embeds images (a CLIP model's image tower, a multimodal model's image graph)
has a route that takes images. How a route's inputs become its outputs is its step
(``steps.py``), which its kind chose.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from embedgate.contract.spec import ROUTE_TASKS

from ...errors import UnknownRoute
from .steps import TEXT_GRAPH, Step

# Every task a route may take (metadata.json's), the first the one that applies when a
# request names none; the others are those a request may name.
EVERY_TASK: tuple[str, ...] = ROUTE_TASKS
DEFAULT_TASK = EVERY_TASK[0]

_serials = itertools.count(1)


@dataclass(eq=False)
class Route:
    # As the model names it ("" for a model without routes).
    name: str
    # The tasks that take it: "query", "document", "default" (a request that names none).
    tasks: tuple[str, ...]
    tokenizer: Any
    # The Triton model it runs on, and its version there ("": the model's only one).
    part: str
    version: str = ""
    # How its inputs become its outputs: texts through its graph, or what its kind chose
    # (computed by the gateway from stored weights, ``static.py``; images through an image
    # graph, prepared as the model's preprocessing says; a kind's own steps).
    step: Step = TEXT_GRAPH
    # New for every route of every load: the response cache's rows of one are never another's.
    serial: int = field(default_factory=lambda: next(_serials))

    def describe(self) -> str:
        tasks = ", ".join("no task" if task == DEFAULT_TASK else f"task '{task}'" for task in self.tasks)
        return f"'{self.name}' ({tasks})" if self.name else tasks


def route_for(routes: Sequence[Route], task: str | None, model_name: str, *, images: bool = False) -> Route:
    """The route a request's texts (or, with ``images``, its images) of ``task`` (None: it
    names none) take; a task the model has no route for is refused, naming the routes it has."""
    wanted = task or DEFAULT_TASK
    for route in routes:
        if wanted in route.tasks and route.step.takes_images == images:
            return route
    offered = "; ".join(route.describe() for route in routes)
    what = "a task" if wanted == DEFAULT_TASK else f"task '{wanted}'"
    raise UnknownRoute(f"model '{model_name}' has no route for {what}; its routes: {offered}")
