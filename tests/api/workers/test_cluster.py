"""A worker's view of its primary, without processes: the models it serves follow the
primary's revisions in order (a deleted-and-reloaded model is taken again), loads answer
only once applied here, Triton's restarts as the primary reports them, and the primary's
coordinator of bulk jobs reached over the channel."""

from __future__ import annotations

import asyncio
import subprocess
from types import SimpleNamespace

import pytest

from embedgate.api.errors import ModelNotFound
from embedgate.api.jobs.coordinator import Coordinator
from embedgate.api.jobs.files import LocalFiles
from embedgate.api.jobs.queue import LocalQueue
from embedgate.api.jobs.store import JobStore
from embedgate.api.settings import Settings
from embedgate.api.workers import cluster as cluster_module
from embedgate.api.workers.cluster import SharedModels, SharedTriton, WorkerCluster
from embedgate.api.workers.primary import Primary
from tests.api.jobs.test_queue import exercise
from tests.api.workers.test_channel import pair


class FakeRegistry:
    def __init__(self, missing=()):
        self.served: dict[str, object] = {}
        self.adopted: list[str] = []
        self.missing = set(missing)
        self.residency = SimpleNamespace(decides=True)

    async def adopt(self, key):
        await asyncio.sleep(0)
        if key in self.missing:
            raise ModelNotFound(f"model '{key}' is not in the repository")
        self.adopted.append(key)
        self.served[key] = SimpleNamespace(name=key, serial=len(self.adopted))
        return self.served[key]

    def forget(self, key):
        self.served.pop(key, None)

    def held(self, key):
        return self.served.get(key)


def attached(registry) -> WorkerCluster:
    worker = WorkerCluster(Settings(), "/nonexistent", 0)
    worker._registry = asyncio.get_running_loop().create_future()
    worker.control(registry)
    return worker


async def test_revisions_apply_in_order_and_a_new_load_of_a_name_is_taken_again():
    registry = FakeRegistry()
    worker = attached(registry)
    await worker._sync(1, {"a": 10, "b": 11})
    assert set(registry.served) == {"a", "b"}
    # An older revision arriving late changes nothing.
    await worker._sync(0, {})
    assert set(registry.served) == {"a", "b"}
    # "a" unloaded; "b" deleted and converted again (a new load, a new serial).
    await worker._sync(3, {"b": 12})
    assert set(registry.served) == {"b"} and registry.adopted == ["a", "b", "b"]
    await worker.applied(3)


async def test_a_model_converted_again_is_taken_in_place_of_the_old_one_never_missing_meanwhile():
    registry = FakeRegistry()
    worker = attached(registry)
    await worker._sync(1, {"org/m": 10})
    old = registry.served["org/m"]
    seen_while_taking = []
    adopt = registry.adopt

    async def adopt_watched(key):
        seen_while_taking.append(registry.served.get(key))
        return await adopt(key)

    registry.adopt = adopt_watched
    await worker._sync(2, {"org/m": 11})  # the primary replaced its copy: a new load, a new serial
    assert seen_while_taking == [old] and registry.served["org/m"] is not old
    # One that cannot be taken is no longer served at all: never the old copy on the new graph.
    registry.missing.add("org/m")
    await worker._sync(3, {"org/m": 12})
    assert "org/m" not in registry.served


async def test_a_model_this_worker_cannot_take_is_skipped_and_the_rest_applied():
    registry = FakeRegistry(missing={"gone"})
    worker = attached(registry)
    await worker._sync(1, {"gone": 1, "here": 2})
    assert set(registry.served) == {"here"} and worker._revision == 1


async def test_a_load_answers_once_this_worker_has_the_revision_that_holds_it():
    registry = FakeRegistry()
    worker = attached(registry)

    async def call(method, *args, **kwargs):
        assert method == "load_sentence_transformer" and kwargs["trust_remote_code"] is False
        # The primary answers; the change reaches this worker a moment later.
        asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(worker._sync(5, {"org/m": 1})))
        return ("org/m", False, True, 5)

    worker.call = call
    outcome = await SharedModels(registry, worker).load_sentence_transformer("org/m", None, trust_remote_code=False)
    assert outcome.model is registry.served["org/m"] and outcome.converted and not outcome.already_loaded


async def test_ready_once_the_primary_restored_and_this_worker_took_its_models():
    registry = FakeRegistry()
    worker = attached(registry)
    gateway = SimpleNamespace(applied=False)
    gateway.cluster_models_applied = lambda: setattr(gateway, "applied", True)
    worker._hello_models = (0, {"org/m": 1})
    state = {"ready": True, "serving": True, "restarts": 0, "restored": False}
    await worker._state(state)
    # The models the primary serves are taken before the app starts.
    await worker.attached(gateway)
    assert set(registry.served) == {"org/m"}
    assert not registry.residency.decides  # the primary keeps what loads said, and unloads
    assert not gateway.applied
    await worker._state({**state, "restored": True})
    assert gateway.applied


async def test_wait_restarted_follows_the_primarys_reports(monkeypatch):
    monkeypatch.setattr(cluster_module, "NOTICE_S", 0.1)
    triton = SharedTriton(SimpleNamespace())
    triton.update({"ready": True, "serving": True, "restarts": 2})
    # Triton never went away: a lost connection was something else.
    assert await asyncio.wait_for(triton.wait_restarted(2), 5) is False

    waiting = asyncio.create_task(triton.wait_restarted(2))
    triton.update({"ready": False, "serving": False, "restarts": 2})
    await asyncio.sleep(0.2)
    triton.update({"ready": True, "serving": False, "restarts": 3})  # restarted, models not back yet
    await asyncio.sleep(0.2)
    assert not waiting.done()
    triton.update({"ready": True, "serving": True, "restarts": 3})
    assert await asyncio.wait_for(waiting, 5) is True


async def test_the_job_queue_of_a_worker_is_the_primarys_coordinator_over_the_channel(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite3")
    coordinator = Coordinator(store, LocalFiles(tmp_path / "files"), lease_s=60)
    # The primary's handler of a worker's coordinator calls, on a primary with only its coordinator.
    primary = SimpleNamespace(_jobs=LocalQueue(coordinator))
    handlers = {"jobs": lambda *args: Primary._call_jobs(primary, *args)}
    try:
        async with pair(tmp_path, handlers, {}) as (_, line):
            worker = WorkerCluster(Settings(), "/nonexistent", 0)
            worker._peer = line
            await exercise(worker.job_queue(Settings()), coordinator, tmp_path)
    finally:
        store.close()


@pytest.mark.parametrize("cores,gpus,expected", [(2, 0, 1), (7, 0, 1), (16, 0, 4), (64, 0, 8), (16, 1, 8), (4, 1, 4)])
def test_the_automatic_worker_count(monkeypatch, cores, gpus, expected):
    from embedgate.api.workers import pool

    monkeypatch.setattr(pool.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(pool.gpus, "driver_gpus", lambda: gpus)
    assert pool.worker_count(Settings()) == expected
    assert pool.worker_count(Settings(workers=3)) == 3


def test_each_worker_takes_its_share_of_the_per_process_budgets():
    from embedgate.api.workers.pool import worker_settings

    own = worker_settings(Settings(max_inflight_requests=10, response_cache_mb=64.0), 4)
    assert own.max_inflight_requests == 3 and own.response_cache_mb == 16.0
    limited = worker_settings(Settings(key_requests_per_minute=10, key_tokens_per_minute=1000), 4)
    assert (limited.key_requests_per_minute, limited.key_tokens_per_minute) == (3, 250)
    assert worker_settings(Settings(), 4).key_requests_per_minute == 0  # no limit stays none


async def test_a_dead_triton_the_primary_has_not_reported_yet_is_waited_for(monkeypatch):
    monkeypatch.setattr(cluster_module, "NOTICE_S", 0.1)
    child = subprocess.Popen(["sleep", "30"])
    child.kill()  # dead (not reaped): the primary has not seen it yet
    try:
        triton = SharedTriton(SimpleNamespace())
        triton.update({"ready": True, "serving": True, "restarts": 2, "triton_pid": child.pid})
        waiting = asyncio.create_task(triton.wait_restarted(2))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        triton.update({"ready": True, "serving": True, "restarts": 3, "triton_pid": None})
        assert await asyncio.wait_for(waiting, 5) is True
    finally:
        child.wait()
