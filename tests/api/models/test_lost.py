"""A model whose process died in Triton is loaded again, also when the loss is seen while
its lock is held by something else (fakes for the registry and its backend)."""

from __future__ import annotations

import asyncio
import collections
from types import SimpleNamespace

from embedgate.api.errors import TritonConnectionLost, TritonUnavailable
from embedgate.api.models.lost import LostProcesses


class FakeBackend:
    def __init__(self):
        self.reloaded: list[str] = []
        self.abandoned: list[str] = []
        self.failure: Exception | None = None

    async def reload(self, part: str) -> None:
        if self.failure is not None:
            raise self.failure
        self.reloaded.append(part)

    def abandon(self, part: str, replaced_at: float) -> None:
        self.abandoned.append(part)


class FakeRegistry:
    def __init__(self):
        self.backend = FakeBackend()
        self.model = SimpleNamespace(name="org/m", triton_name="org--m", triton_names=("org--m",))
        self.models = {"org/m": self.model}
        self.locks = collections.defaultdict(asyncio.Lock)

    def held(self, key):
        return self.models.get(key)

    def loaded(self):
        return list(self.models.values())

    def lock(self, triton_name):
        return self.locks[triton_name]


async def test_a_lost_process_is_loaded_again_once():
    registry = FakeRegistry()
    lost = LostProcesses(registry)
    await lost.exited("org--m")
    assert registry.backend.reloaded == ["org--m"] and registry.backend.abandoned == ["org--m"]
    # Requests sent before that reload, failing now, do not load it again.
    await lost.reload("org/m", "org--m", sent_at=0.0)
    assert registry.backend.reloaded == ["org--m"]


async def test_a_loss_seen_while_the_lock_is_held_is_not_dropped():
    registry = FakeRegistry()
    lost = LostProcesses(registry)
    lock = registry.lock("org--m")
    await lock.acquire()  # a load call that finds the model loaded, say
    told = asyncio.create_task(lost.exited("org--m"))
    await asyncio.sleep(0.05)
    assert registry.backend.reloaded == []
    lock.release()
    await asyncio.wait_for(told, 5)
    assert registry.backend.reloaded == ["org--m"]


async def test_a_loss_from_an_unload_under_way_loads_nothing():
    registry = FakeRegistry()
    lost = LostProcesses(registry)
    lock = registry.lock("org--m")
    await lock.acquire()  # the model's own unload ends its stubs
    told = asyncio.create_task(lost.exited("org--m"))
    await asyncio.sleep(0.05)
    registry.models.clear()
    lock.release()
    await asyncio.wait_for(told, 5)
    assert registry.backend.reloaded == []


async def test_a_loss_that_took_tritonserver_down_is_left_to_its_restart(caplog):
    """Triton aborted with the stub (it does when the stub died holding their shared
    lock): the reload finds no server, which is no error of the model's; the restart that
    follows loads every model again."""
    registry = FakeRegistry()
    registry.backend.failure = TritonConnectionLost("the inference server is unavailable; retry shortly")
    lost = LostProcesses(registry)
    with caplog.at_level("INFO", logger="embedgate.registry"):
        await lost.exited("org--m")
    assert registry.backend.abandoned == []
    assert [r.levelname for r in caplog.records if "went down with the process" in r.message] == ["INFO"]
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_a_reload_that_fails_otherwise_is_logged_as_an_error(caplog):
    registry = FakeRegistry()
    registry.backend.failure = TritonUnavailable("model 'org--m' is not available in the inference server right now")
    lost = LostProcesses(registry)
    with caplog.at_level("INFO", logger="embedgate.registry"):
        await lost.exited("org--m")
    assert [r.levelname for r in caplog.records if "could not load org/m again" in r.message] == ["ERROR"]
