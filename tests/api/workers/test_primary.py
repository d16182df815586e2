"""The primary of gateway workers asks them how they use the models (for the memory budget
and keep-alive it decides for all of them): in use in any, idle as long as the least idle
says; a worker that does not answer uses every model."""

from __future__ import annotations

from types import SimpleNamespace

from embedgate.api.workers.primary import Primary


class Worker:
    def __init__(self, uses=None):
        self.uses = uses

    async def call(self, method):
        assert method == "uses"
        if self.uses is None:
            raise ConnectionResetError("gone")
        return self.uses


def primary(*workers: Worker) -> Primary:
    made = Primary.__new__(Primary)
    made.peers = {worker: index for index, worker in enumerate(workers)}
    models = [SimpleNamespace(name=name) for name in ("a", "b", "c")]
    made.host = SimpleNamespace(registry=SimpleNamespace(loaded=lambda: models))
    return made


async def test_the_workers_uses_merged():
    uses = await primary(Worker({"a": (True, 0.0), "b": (False, 9.0)}), Worker({"a": (False, 30.0), "b": (False, 2.0)}))._uses()
    assert uses == {"a": (True, 0.0), "b": (False, 2.0)}


async def test_a_worker_that_does_not_answer_uses_every_model():
    uses = await primary(Worker({"b": (False, 9.0)}), Worker())._uses()
    assert uses == {"a": (True, 0.0), "b": (True, 0.0), "c": (True, 0.0)}
