"""No-op inference: the calls are answered with zeros of the graph's shape and never reach
the server, while a model's life (loads, unloads, readiness, what the server reports) is
the given backend's, as without it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from embedgate.api.compute.backend.noop import NoopBackend


class Recording:
    restarts = 2
    watched = True

    def __init__(self):
        self.calls: list[tuple] = []

    async def load(self, model, *, fresh=False):
        self.calls.append(("load", model.name, fresh))

    async def unload(self, model, *, timeout_s):
        self.calls.append(("unload", model.name))

    async def ready(self):
        return False

    async def statistics(self):
        return [{"name": "m"}]

    async def infer(self, *args, **kwargs):
        raise AssertionError("no call reaches the server")


async def test_calls_are_zeros_and_a_models_life_is_the_servers():
    models = Recording()
    backend = NoopBackend(models)
    zeros = SimpleNamespace(noop_output=lambda tensors: np.zeros((2, 4), np.float32))
    model = SimpleNamespace(name="m", triton_names=("m",), kind=zeros)
    rows = await backend.infer(model, "m", {"input_ids": np.ones((2, 3), np.int64)}, "embedding", timeout_s=1)
    assert rows.shape == (2, 4) and not rows.any()
    await backend.load(model, fresh=True)
    await backend.unload(model, timeout_s=1)
    assert models.calls == [("load", "m", True), ("unload", "m")]
    assert (backend.restarts, await backend.ready(), await backend.statistics()) == (2, False, [{"name": "m"}])


async def test_without_a_server_there_is_nothing_to_load_or_report():
    backend = NoopBackend()
    await backend.load(SimpleNamespace(name="m", triton_names=("m",)))
    assert await backend.ready() and await backend.statistics() == [] and await backend.metrics_text() is None
