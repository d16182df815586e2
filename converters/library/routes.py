"""A model's routes: the modules each task's texts go through.

A sentence-transformers model may hold a ``Router`` (``Router.for_query_document``,
inference-free sparse models): ``encode_query`` sends its texts through the "query" route,
``encode_document`` through the "document" route and ``encode`` without a task through the
default one. Each route is a module stack of its own (the modules before the Router, the
route's, the modules after it), converted and checked on its own, and served for its tasks
only: one graph for every task would answer a query with the document route's modules.

Routes are resolved for text, the only modality the gateway serves, as ``Router`` resolves
them: by task, through its route mappings, then by route name, then its default route.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedgate.contract.errors import UnsupportedModelError
from embedgate.contract.spec import ROUTE_TASKS

ROUTER = "Router"


@dataclass(frozen=True)
class ModuleRoute:
    """A route as the converter sees it: the modules its tasks' texts go through (the
    gateway's ``Route`` is the same route served: its tokenizer and Triton model)."""

    # The Router's name for it; "" for a model without a Router.
    name: str
    tasks: tuple[str, ...]
    # Every module the route's texts go through, in order (no Router among them).
    modules: tuple

    @property
    def task(self) -> str | None:
        """The task to encode with for this route's reference (None: encode without one)."""
        return None if "default" in self.tasks else self.tasks[0]

    def describe(self) -> str:
        return f"route '{self.name}'" if self.name else "the model"


def routes(model) -> list[ModuleRoute]:
    """``model``'s routes, the default route first; one route for every task where the model
    has no Router. Refused where a Router could not be served as the library runs it."""
    modules = list(model)
    at = [index for index, module in enumerate(modules) if _is_router(module)]
    if not at:
        return [ModuleRoute("", ROUTE_TASKS, tuple(modules))]
    if len(at) > 1:
        raise UnsupportedModelError(f"unsupported model: it has {len(at)} Routers; embedgate serves models with one")
    router = modules[at[0]]
    before, after = modules[: at[0]], modules[at[0] + 1 :]
    taken: dict[str, list[str]] = {}
    for task in ROUTE_TASKS:
        name = _resolve(router, task)
        if name is not None:
            taken.setdefault(name, []).append(task)
    if not taken:
        raise UnsupportedModelError(
            f"unsupported model: its Router has no route for text (routes {', '.join(map(repr, router.sub_modules))})"
        )
    found = []
    for name, tasks in taken.items():
        route_modules = list(router.sub_modules[name])
        nested = [type(module).__name__ for module in route_modules if _is_router(module)]
        if nested:
            raise UnsupportedModelError(f"unsupported model: its route '{name}' holds another Router")
        found.append(ModuleRoute(name, tuple(tasks), tuple(before + route_modules + after)))
    return sorted(found, key=lambda route: ROUTE_TASKS.index(route.tasks[0]))


def describe(found: list[ModuleRoute]) -> str:
    """The routes for a progress line: ``query (query), document (default, document)``."""
    return ", ".join(f"{route.name} ({', '.join(route.tasks)})" for route in found)


def _is_router(module) -> bool:
    return type(module).__name__ == ROUTER and hasattr(module, "sub_modules")


def _resolve(router, task: str) -> str | None:
    """The route ``router`` takes a text of ``task`` through, or None where it has none."""
    try:
        return router._resolve_route(task=None if task == "default" else task, modality="text")
    except ValueError:
        return None
