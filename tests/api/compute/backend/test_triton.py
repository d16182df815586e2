"""The Triton backend's side of a model's life, over a fake Triton client and server: a
model of several parts is loaded whole or not at all, a load Triton died under is made
again once it is back, an external Triton already serving a model keeps it, what
Triton holds and reports is read through it, and a Triton that does not answer is not ready."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from embedgate.api.compute.backend import triton as triton_backend
from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.errors import TritonConnectionLost, TritonError


class FakeClient:
    def __init__(self, failing: set[str] = frozenset(), dying: int = 0):
        self.failing = failing
        # Loads that meet a Triton dying under them.
        self.dying = dying
        self.loads: list[str] = []
        self.unloads: list[str] = []
        self.states: dict[str, str] = {}
        self.ready_asked = 0
        self.live_asked = 0

    async def load(self, part: str) -> None:
        if self.dying:
            self.dying -= 1
            raise TritonConnectionLost("the inference server is unavailable; retry shortly")
        if part in self.failing:
            raise TritonError(f"failed to load '{part}'")
        self.loads.append(part)

    async def unload(self, part: str, *, wait_s: float = 30.0) -> None:
        self.unloads.append(part)

    async def repository_states(self) -> dict[str, str]:
        return self.states

    async def is_ready(self) -> bool:
        self.ready_asked += 1
        return True

    async def is_live(self) -> bool:
        self.live_asked += 1
        return True

    async def statistics(self):
        return [{"name": "m", "inference_count": 1}]


def model(*parts: str):
    return SimpleNamespace(name="org/m", triton_names=parts)


class FakeTriton:
    def __init__(self, embedded: bool = True, comes_back: bool = True):
        self.embedded = embedded
        self.comes_back = comes_back
        self.restarts = 0
        self.serving = True

    async def wait_restarted(self, since: int) -> bool:
        if self.comes_back:
            self.restarts += 1
        return self.comes_back

    def is_ready(self) -> bool:
        return True


async def test_a_model_is_loaded_whole_or_not_at_all():
    client = FakeClient(failing={"m_image"})
    with pytest.raises(TritonError):
        await TritonBackend(client, FakeTriton()).load(model("m_text", "m_image"))
    assert client.loads == ["m_text"] and client.unloads == ["m_text"]


async def test_a_load_triton_died_under_is_made_again_once_it_is_back():
    client = FakeClient(dying=1)
    await TritonBackend(client, FakeTriton()).load(model("m"))
    assert client.loads == ["m"]
    with pytest.raises(TritonConnectionLost):
        await TritonBackend(FakeClient(dying=1), FakeTriton(comes_back=False)).load(model("m"))


async def test_an_external_triton_already_serving_a_model_keeps_it_unless_its_files_are_new():
    client = FakeClient()
    client.states = {"m": "READY"}
    backend = TritonBackend(client, FakeTriton(embedded=False))
    assert not backend.watched
    await backend.load(model("m"))
    assert client.loads == []
    await backend.load(model("m"), fresh=True)
    assert client.loads == ["m"]
    # An embedded Triton is this gateway's own: what it holds is what this gateway loaded.
    embedded = FakeClient()
    embedded.states = {"m": "READY"}
    await TritonBackend(embedded, FakeTriton()).load(model("m"))
    assert embedded.loads == ["m"]


async def test_what_triton_holds_and_reports_is_read_through_it():
    client = FakeClient()
    client.states = {"a": "READY", "b": "LOADING", "c": "UNAVAILABLE", "d": "UNLOADING"}
    backend = TritonBackend(client, SimpleNamespace(embedded=False, restarts=3, metrics_url="http://127.0.0.1:9/metrics"))
    assert await backend.held() == {"a", "b"}
    assert backend.restarts == 3
    assert await backend.statistics() == [{"name": "m", "inference_count": 1}]
    # Triton's readiness is asked of it at most once a second.
    assert await backend.ready() and await backend.ready()
    assert client.ready_asked == 1


async def test_a_model_the_gateway_computes_whole_loads_nothing():
    client = FakeClient()
    await TritonBackend(client, FakeTriton(embedded=False)).load(model())
    assert client.loads == []


class SilentClient(FakeClient):
    """A tritonserver that runs but never answers (hung, or stopped)."""

    async def is_live(self) -> bool:
        self.live_asked += 1
        await asyncio.Event().wait()


class LoadingClient(FakeClient):
    """A tritonserver loading a model: alive, and "not ready" by its own strict readiness."""

    async def is_ready(self) -> bool:
        self.ready_asked += 1
        return False


class Restarting(FakeTriton):
    def is_ready(self) -> bool:
        return False


async def test_an_embedded_triton_that_runs_but_does_not_answer_is_not_ready(monkeypatch):
    monkeypatch.setattr(triton_backend, "READY_ASK_TIMEOUT_S", 0.05)
    # Its supervisor sees it running: only asking it finds it does not answer.
    silent = SilentClient()
    assert not await TritonBackend(silent, FakeTriton()).ready()
    assert silent.live_asked == 1
    # Asked whether it is alive, not ready: Triton is "not ready" while a model loads.
    loading = LoadingClient()
    assert await TritonBackend(loading, FakeTriton()).ready()
    assert (loading.live_asked, loading.ready_asked) == (1, 0)
    # One its supervisor is (re)starting is not ready, and is not asked.
    assert not await TritonBackend(loading, Restarting()).ready()
    assert loading.live_asked == 1
