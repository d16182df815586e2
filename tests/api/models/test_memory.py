"""A model's memory (``models/memory.py``): its stubs' resident memory, and what its parts
inside tritonserver's own process added at its load."""

from __future__ import annotations

from types import SimpleNamespace

from embedgate.api.models.memory import MemoryMeter, Reading, grown_by, model_bytes


def test_a_models_memory_is_its_parts_stubs_and_what_it_took_inside_tritonserver():
    reading = Reading(server=1000, parts={"m-text": 30, "m-image": 40, "other": 500})
    assert model_bytes(("m-text", "m-image"), reading, 0) == 70
    assert model_bytes(("native",), reading, 200) == 200


def test_tritonserver_growth_counts_only_for_a_part_without_a_stub():
    before, after = Reading(1000, {}), Reading(1300, {"python": 50})
    assert grown_by(("python",), before, after) == 0
    assert grown_by(("native",), before, after) == 300
    assert grown_by(("native",), Reading(1000, {}), Reading(900, {})) == 0
    assert grown_by(("native",), Reading(None, {}), after) == 0


def test_a_triton_that_runs_elsewhere_is_not_measured():
    meter = MemoryMeter(SimpleNamespace(host_memory=lambda: None))
    assert meter.read() == Reading(None, {})
