"""Which loaded models a load unloads under the memory budget: the least recently used idle
ones, never one in use or pinned, none at all where the idle ones do not free enough."""

from __future__ import annotations

import pytest

from embedgate.api.errors import MemoryBudgetExceeded
from embedgate.api.models.budget import MIB, Holder, to_unload


def holder(name: str, mib: int, last_used: float, *, in_use: bool = False, pinned: bool = False, gpu: int = 0) -> Holder:
    return Holder(name, {"host": mib * MIB, "gpu": gpu * MIB}, last_used, in_use, pinned)


HOST = {"host": 300 * MIB, "gpu": 0}


def names(chosen: list[Holder]) -> list[str]:
    return [h.name for h in chosen]


def test_nothing_is_unloaded_while_the_load_fits():
    assert to_unload([holder("a", 100, 1), holder("b", 100, 2)], {"host": 100 * MIB}, HOST, "c") == []


def test_no_budget_unloads_nothing():
    assert to_unload([holder("a", 10_000, 1)], {"host": 10_000 * MIB}, {"host": 0, "gpu": 0}, "c") == []


def test_the_least_recently_used_idle_models_go_first_until_the_load_fits():
    holders = [holder("newer", 100, 3), holder("oldest", 100, 1), holder("older", 100, 2)]
    assert names(to_unload(holders, {"host": 100 * MIB}, HOST, "c")) == ["oldest"]
    assert names(to_unload(holders, {"host": 200 * MIB}, HOST, "c")) == ["oldest", "older"]


def test_a_model_in_use_or_pinned_is_never_chosen():
    holders = [holder("busy", 100, 1, in_use=True), holder("pinned", 100, 2, pinned=True), holder("idle", 100, 3)]
    assert names(to_unload(holders, {"host": 100 * MIB}, HOST, "c")) == ["idle"]


def test_a_load_the_idle_models_cannot_make_room_for_is_refused_naming_the_budget_and_its_holders():
    holders = [holder("busy", 150, 1, in_use=True), holder("pinned", 100, 2, pinned=True), holder("idle", 30, 3)]
    with pytest.raises(MemoryBudgetExceeded) as refused:
        to_unload(holders, {"host": 100 * MIB}, HOST, "org/new")
    message = refused.value.message
    assert "EMBEDGATE_MEMORY_BUDGET_MB" in message and "300 MiB" in message and "'org/new'" in message
    assert "busy 150 MiB (in use)" in message and "pinned 100 MiB (pinned)" in message and "idle 30 MiB" in message


def test_a_model_larger_than_the_budget_is_refused_without_unloading_anything():
    with pytest.raises(MemoryBudgetExceeded):
        to_unload([holder("idle", 100, 1)], {"host": 400 * MIB}, HOST, "huge")


def test_both_budgets_must_hold():
    budgets = {"host": 1000 * MIB, "gpu": 300 * MIB}
    holders = [holder("a", 10, 1, gpu=200), holder("b", 10, 2, gpu=50), holder("c", 10, 3, gpu=50)]
    # Host has room; the GPU does not: the least recently used goes, for its GPU memory.
    assert names(to_unload(holders, {"host": 10 * MIB, "gpu": 100 * MIB}, budgets, "d")) == ["a"]
    with pytest.raises(MemoryBudgetExceeded) as refused:
        to_unload(holders, {"gpu": 400 * MIB}, budgets, "d")
    assert "EMBEDGATE_GPU_MEMORY_BUDGET_MB" in refused.value.message
