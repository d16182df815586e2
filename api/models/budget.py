"""Which loaded models a load unloads to fit under the memory budget: the least recently
used idle ones, never one in use or pinned, and none at all when unloading every idle one
would still not free enough (the load is refused instead, naming what holds the memory)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import MemoryBudgetExceeded

# The memories a budget bounds, with the setting that bounds each.
SETTINGS = {"host": "EMBEDGATE_MEMORY_BUDGET_MB", "gpu": "EMBEDGATE_GPU_MEMORY_BUDGET_MB"}
MIB = 1024 * 1024


@dataclass(frozen=True)
class Holder:
    """A loaded model as the budget sees it."""

    name: str
    # Bytes it holds, by memory ("host", "gpu").
    held: Mapping[str, int]
    last_used: float
    # Requests in flight or queued, requests waiting for it, a bulk job's calls.
    in_use: bool
    pinned: bool

    @property
    def idle(self) -> bool:
        return not self.in_use and not self.pinned


def to_unload(holders: Sequence[Holder], needed: Mapping[str, int], budgets: Mapping[str, int], loading: str) -> list[Holder]:
    """The models to unload, least recently used first, so that ``needed`` more bytes (by
    memory) fit under ``budgets`` (bytes; 0: none); raises :class:`MemoryBudgetExceeded`
    (naming ``loading``, the budget and its holders) where the idle ones do not free enough."""
    bounded = {memory: budget for memory, budget in budgets.items() if budget > 0}
    over = {memory: sum(h.held.get(memory, 0) for h in holders) + needed.get(memory, 0) - budget
            for memory, budget in bounded.items()}
    chosen: list[Holder] = []
    for holder in sorted((h for h in holders if h.idle), key=lambda h: h.last_used):
        if all(excess <= 0 for excess in over.values()):
            break
        chosen.append(holder)
        over = {memory: excess - holder.held.get(memory, 0) for memory, excess in over.items()}
    short = [memory for memory, excess in over.items() if excess > 0]
    if short:
        raise MemoryBudgetExceeded(_refusal(short[0], holders, needed, budgets, loading))
    return chosen


def _refusal(memory: str, holders: Sequence[Holder], needed: Mapping[str, int], budgets: Mapping[str, int],
             loading: str) -> str:
    def state(holder: Holder) -> str:
        why = ", ".join(word for word, yes in (("in use", holder.in_use), ("pinned", holder.pinned)) if yes)
        return f"{holder.name} {_mib(holder.held.get(memory, 0))}" + (f" ({why})" if why else "")

    held = sum(h.held.get(memory, 0) for h in holders)
    holding = "; ".join(state(h) for h in sorted(holders, key=lambda h: -h.held.get(memory, 0))) or "no model"
    return (
        f"loading '{loading}' needs about {_mib(needed.get(memory, 0))} of {memory} memory, and the {memory} memory "
        f"budget ({SETTINGS[memory]}) is {_mib(budgets[memory])}, of which the loaded models hold {_mib(held)}: "
        f"{holding}; no idle model frees enough"
    )


def _mib(size: int) -> str:
    return f"{size / MIB:.0f} MiB"
