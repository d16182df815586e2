"""TritonClient's loads: a load and a reload both run with the load watch beside them (the
watch ends a tritonserver whose load hangs), and a load that Triton's death breaks is a
lost connection."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from embedgate.api.errors import TritonConnectionLost
from embedgate.api.triton.client import RELOAD_PARAMETER, TritonClient


class FakeControl:
    """Triton's control API: a load waits until ``finish`` is set (or fails as a broken
    connection where ``broken``)."""

    def __init__(self):
        self.finish = asyncio.Event()
        self.broken = False
        self.loads: list[tuple[str, str | None]] = []

    async def get_model_config(self, name: str) -> dict:
        return {"name": name, "max_batch_size": 8}

    async def load_model(self, name: str, config: str | None = None) -> None:
        self.loads.append((name, config))
        await self.finish.wait()
        if self.broken:
            raise aiohttp.ServerDisconnectedError()

    async def close(self) -> None:
        pass


class Watch:
    """The load watch: records what it watched, and whether it was still running (not
    cancelled) when the load ended."""

    def __init__(self):
        self.watching: list[str] = []
        self.cancelled: list[str] = []

    async def __call__(self, triton_name: str) -> None:
        self.watching.append(triton_name)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(triton_name)
            raise


@pytest.fixture
async def control_and_watch():
    watch = Watch()
    client = TritonClient("127.0.0.1:1", "127.0.0.1:1", control_timeout_s=5, load_watch=watch)
    await client.close()
    client._control = control = FakeControl()
    yield client, control, watch


@pytest.mark.parametrize("operation", ["load", "reload"])
async def test_a_load_and_a_reload_run_watched_until_they_end(control_and_watch, operation):
    client, control, watch = control_and_watch
    loading = asyncio.create_task(getattr(client, operation)("org--m"))
    while not (control.loads and watch.watching):
        await asyncio.sleep(0.01)
    assert watch.watching == ["org--m"] and watch.cancelled == []  # watched while Triton loads
    control.finish.set()
    await loading
    assert watch.cancelled == ["org--m"]  # and no longer once the load is done
    (name, config), = control.loads
    assert name == "org--m"
    if operation == "reload":  # the model's own config, marked so that Triton loads it anew
        assert RELOAD_PARAMETER in json.loads(config)["parameters"]
    else:
        assert config is None


async def test_a_reload_that_triton_dies_under_is_a_lost_connection_and_ends_its_watch(control_and_watch):
    client, control, watch = control_and_watch
    control.broken = True
    reloading = asyncio.create_task(client.reload("org--m"))
    while not watch.watching:
        await asyncio.sleep(0.01)
    control.finish.set()
    with pytest.raises(TritonConnectionLost):
        await reloading
    assert watch.cancelled == ["org--m"]
