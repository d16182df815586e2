"""A replica's way to the application's coordinator actor: each typed call reaches the actor
as the protocol's name, and answers (and the gateway's errors) come back as the
coordinator gives them."""

from __future__ import annotations

import asyncio

from embedgate.api.jobs.coordinator import Coordinator
from embedgate.api.jobs.files import LocalFiles
from embedgate.api.jobs.queue import METHODS, forwarded
from embedgate.api.jobs.store import JobStore
from embedgate.api.ray_serve.jobs import RayQueue
from tests.api.jobs.test_queue import exercise


class FakeActor:
    """An actor handle as RayQueue uses it: ``call.remote(...)`` gives an awaitable of what
    the actor's ``call`` returns (it runs the forwarded name on its coordinator)."""

    def __init__(self, coordinator: Coordinator):
        self.coordinator = coordinator
        self.names: list[str] = []
        self.call = self

    def remote(self, name, *args, **kwargs):
        self.names.append(name)
        answer = asyncio.get_running_loop().create_future()
        try:
            answer.set_result(forwarded(self.coordinator, name)(*args, **kwargs))
        except Exception as error:  # noqa: BLE001 - Ray raises the actor's error where it is awaited
            answer.set_exception(error)
        return answer


async def test_every_call_reaches_the_actor_by_the_protocols_name(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite3")
    actor = FakeActor(Coordinator(store, LocalFiles(tmp_path / "files"), lease_s=60))
    try:
        await exercise(RayQueue(actor), actor.coordinator, tmp_path)
    finally:
        store.close()
    assert set(actor.names) == METHODS
