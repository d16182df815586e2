"""Which models stay loaded (``models/residency.py``), with fakes for the registry and for
tritonserver's processes: the least recently used idle model makes room for a load, never
one in use (requests in flight, a bulk job's calls, requests waiting for its load, its lock
held) or pinned; what a model was measured at is what its next load expects; an idle model
goes after its keep-alive."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from embedgate.api.errors import MemoryBudgetExceeded
from embedgate.api.models.budget import MIB
from embedgate.api.models.memory import Reading
from embedgate.api.models.residency import Residency
from embedgate.api.telemetry.scrape import GPU_MEMORY_METRIC


@dataclass
class FakeModel:
    name: str
    last_used: float
    parts: int = 1
    inflight: int = 0
    bulk_calls: int = 0
    metadata: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(gpu=None))

    @property
    def triton_name(self) -> str:
        return self.name

    @property
    def triton_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}-{i}" for i in range(self.parts))


class FakeRegistry:
    def __init__(self, budget_mb: float = 300, keep_alive_s: float = -1):
        self.settings = SimpleNamespace(memory_budget_mb=budget_mb, gpu_memory_budget_mb=0, model_keep_alive_s=keep_alive_s)
        self.backend = None
        self.models: dict[str, FakeModel] = {}
        self.locks: collections.defaultdict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self.stopped: list[str] = []

    def loaded(self):
        return list(self.models.values())

    def held(self, key):
        return self.models.get(key)

    def lock(self, triton_name):
        return self.locks[triton_name]

    async def stop_serving(self, model):
        del self.models[model.name]
        self.stopped.append(model.name)


class FakeMeter:
    """Each stub holds ``mib[model]`` MiB (split over its parts)."""

    def __init__(self, registry: FakeRegistry):
        self.registry = registry
        self.mib: dict[str, int] = {}

    def read(self) -> Reading:
        stubs = {}
        for model in self.registry.models.values():
            for part in model.triton_names:
                stubs[part] = self.mib[model.name] * MIB // model.parts
        return Reading(1000 * MIB, stubs)


def resident(*models: tuple[str, int, float], budget_mb: float = 300, keep_alive_s: float = -1):
    """A residency over loaded models (name, MiB, last used)."""
    registry = FakeRegistry(budget_mb, keep_alive_s)
    meter = FakeMeter(registry)
    for name, mib, last_used in models:
        registry.models[name] = FakeModel(name, last_used)
        meter.mib[name] = mib
    return Residency(registry, meter), registry, meter


async def load(residency: Residency, registry: FakeRegistry, meter: FakeMeter, name: str, mib: int, parts: int = 1):
    """A load of ``name`` as ``loading.py`` makes it: room first, then the model, measured."""
    model = FakeModel(name, last_used=100.0, parts=parts)
    async with residency.loading(name, model.triton_names):
        registry.models[name] = model
        meter.mib[name] = mib


async def test_the_least_recently_used_idle_model_makes_room():
    residency, registry, meter = resident(("a", 100, 2.0), ("b", 100, 1.0), ("c", 50, 3.0))
    await load(residency, registry, meter, "d", 100)
    assert registry.stopped == ["b"]
    assert set(registry.models) == {"a", "c", "d"}


@pytest.mark.parametrize("busy", ["inflight", "bulk_calls", "waiting", "locked"])
async def test_a_model_in_use_is_never_unloaded(busy):
    residency, registry, meter = resident(("a", 100, 2.0), ("b", 100, 1.0), ("c", 50, 3.0))
    if busy == "waiting":
        residency.waiting["b"] += 1  # requests waiting for it (a load on their behalf)
    elif busy == "locked":
        await registry.lock("b").acquire()  # loaded again, or being unloaded
    else:
        setattr(registry.models["b"], busy, 1)
    await load(residency, registry, meter, "d", 100)
    assert registry.stopped == ["a"]


async def test_a_pinned_model_is_never_unloaded_and_a_load_nothing_idle_makes_room_for_is_refused():
    residency, registry, meter = resident(("a", 150, 1.0), ("b", 100, 2.0))
    residency.agreed("a", fresh=True, pinned=True)
    registry.models["b"].inflight = 1
    with pytest.raises(MemoryBudgetExceeded) as refused:
        await load(residency, registry, meter, "c", 100)
    assert "a 150 MiB (pinned)" in refused.value.message and "b 100 MiB (in use)" in refused.value.message
    assert registry.stopped == [] and "c" not in registry.models


async def test_a_model_is_expected_to_hold_what_it_held_when_last_measured():
    residency, registry, meter = resident(("a", 50, 1.0), ("b", 50, 2.0), ("c", 50, 3.0), budget_mb=250)
    # Expected to hold 50 (the mean): no room made before; it took 150, so a goes after.
    await load(residency, registry, meter, "big", 150)
    assert registry.stopped == ["a"]
    await residency.unload("big", "idle")
    registry.models["a"] = FakeModel("a", 4.0)
    registry.stopped.clear()
    # Expected to hold 150 now: room made before the load.
    model = FakeModel("big", 100.0)
    async with residency.loading("big", model.triton_names):
        assert registry.stopped == ["b"]
        registry.models["big"] = model
    assert registry.stopped == ["b"]


async def test_a_model_of_several_parts_is_expected_to_hold_as_many_times_the_mean_part():
    residency, registry, meter = resident(("a", 100, 1.0), ("b", 100, 2.0))
    model = FakeModel("clip", 100.0, parts=2)
    async with residency.loading("clip", model.triton_names):
        assert registry.stopped == ["a"]  # 100 + 100 + 2 x 100 > 300: room made before the load
        registry.models["clip"], meter.mib["clip"] = model, 200


async def test_no_budget_unloads_nothing_but_still_measures():
    residency, registry, meter = resident(("a", 100, 1.0), ("b", 100, 2.0), budget_mb=0)
    await load(residency, registry, meter, "c", 500)
    assert registry.stopped == []
    assert (await residency.figures())["c"] == {"host": 500 * MIB}


async def test_an_idle_model_goes_after_its_keep_alive():
    residency, registry, _ = resident(("server", 10, 0.0), ("own", 10, 0.0), ("forever", 10, 0.0), ("busy", 10, 0.0),
                                      keep_alive_s=60)
    residency.agreed("own", fresh=True, keep_alive_s=5)
    residency.agreed("forever", fresh=True, keep_alive_s=-1)
    registry.models["busy"].inflight = 1
    await residency.expire(now=10.0)
    assert registry.stopped == ["own"]
    await residency.expire(now=60.0)
    assert registry.stopped == ["own", "server"]
    await residency.expire(now=10_000.0)
    assert registry.stopped == ["own", "server"]  # "forever" and "busy" stay


async def test_a_reload_with_terms_keeps_what_it_does_not_say():
    residency, _, _ = resident()
    residency.agreed("m", fresh=True, pinned=True, keep_alive_s=30)
    residency.agreed("m", fresh=False, keep_alive_s=5)  # already loaded: pinned stays
    assert residency.terms("m").pinned is True and residency.keep_alive_s("m") == 5
    residency.agreed("m", fresh=True)  # loaded anew: the server's terms
    assert residency.terms("m").pinned is False and residency.keep_alive_s("m") == -1


async def test_where_other_processes_serve_the_models_their_use_counts():
    """A workers' primary serves no request itself: its workers say which models they use."""
    residency, registry, meter = resident(("a", 100, 1.0), ("b", 100, 2.0), ("c", 100, 3.0))
    told = {"a": (True, 0.0), "b": (False, 0.0)}  # a in use in a worker, b used there just now

    async def elsewhere():
        return told

    residency.used_elsewhere = elsewhere
    await load(residency, registry, meter, "d", 100)
    assert registry.stopped == ["c"]


async def test_a_model_used_elsewhere_within_its_keep_alive_stays():
    residency, registry, _ = resident(("a", 10, 0.0), ("b", 10, 0.0), keep_alive_s=5)

    async def elsewhere():
        return {"a": (False, 1.0), "b": (False, 60.0)}

    residency.used_elsewhere = elsewhere
    await residency.expire(now=100.0)
    assert registry.stopped == ["b"]


async def test_a_gateway_worker_lists_the_terms_its_primary_keeps():
    """``/loaded_models`` lists each model's terms: a primary (or a single gateway) its own,
    a gateway worker, which keeps none, those its primary says."""
    residency, _, _ = resident(("a", 10, 0.0), ("b", 10, 0.0), keep_alive_s=60)
    residency.agreed("a", fresh=True, pinned=True)
    residency.agreed("b", fresh=True, keep_alive_s=5)
    assert await residency.listed_terms() == {"a": (True, 60), "b": (False, 5)}

    worker, _, _ = resident(("a", 10, 0.0), ("b", 10, 0.0), keep_alive_s=60)
    worker.decides = False

    async def primary():
        return residency.listed()

    worker.listed_elsewhere = primary
    assert await worker.listed_terms() == {"a": (True, 60), "b": (False, 5)}


class GpuBackend:
    """Triton's metrics with what two GPU instances report, and the driver's figures of one
    model's stubs."""

    def __init__(self, driver: dict[str, int] | None):
        self.driver = driver

    async def metrics_text(self):
        return (
            f'{GPU_MEMORY_METRIC}{{model="a-0",instance="a-0_0_0",part="total"}} {100 * MIB}\n'
            f'{GPU_MEMORY_METRIC}{{model="b-0",instance="b-0_0_0",part="total"}} {200 * MIB}\n'
        ).encode()

    def device_memory(self):
        return self.driver


async def test_a_models_gpu_memory_is_the_drivers_figure_where_it_names_its_stubs():
    """What the driver says a model's stubs hold (their CUDA contexts too: what unloading frees)
    counts; where it names none of them, what the instances report stands in."""
    residency, registry, _ = resident(("a", 10, 0.0), ("b", 10, 0.0))
    for model in registry.models.values():
        model.metadata = SimpleNamespace(gpu=object())
    registry.backend = GpuBackend({"a-0": 600 * MIB})
    figures = await residency.figures()
    assert (figures["a"]["gpu"], figures["b"]["gpu"]) == (600 * MIB, 200 * MIB)
    registry.backend = GpuBackend(None)  # no driver's tool
    figures = await residency.figures()
    assert (figures["a"]["gpu"], figures["b"]["gpu"]) == (100 * MIB, 200 * MIB)
