"""Loads on a model's first request (``models/first_request.py``), with a fake for what loads
models: requests that come together wait for one load, each within its own deadline (the
load goes on past it), a load is always from the repository, and a failed load is tried
again by the next request."""

from __future__ import annotations

import asyncio
import collections
from types import SimpleNamespace

import pytest

from embedgate.api.errors import DeadlineExceeded, ModelNotFound
from embedgate.api.models.first_request import NOT_IN_REPOSITORY, FirstRequestLoads
from embedgate.api.telemetry.metrics import FIRST_REQUEST_LOADS
from tests.helpers import eventually


class FakeControl:
    def __init__(self):
        self.calls: list[tuple] = []
        self.release = asyncio.Event()
        self.failure: Exception | None = None

    async def load_sentence_transformer(self, name, model_path=None, **options):
        return await self._load(("sentence_transformer", name, options))

    async def load_clip(self, model_name, pretrained, **options):
        return await self._load(("clip", model_name, pretrained, options))

    async def _load(self, call):
        self.calls.append(call)
        await self.release.wait()
        if self.failure is not None:
            raise self.failure
        return SimpleNamespace(model=call[1])


def loads() -> tuple[FirstRequestLoads, FakeControl, SimpleNamespace]:
    control = FakeControl()
    residency = SimpleNamespace(waiting=collections.Counter())
    return FirstRequestLoads(lambda: control, residency), control, residency


async def wait(first: FirstRequestLoads, key: str, timeout_s: float = 30) -> float:
    async with first.loaded(key, timeout_s) as waited_s:
        return waited_s


async def test_requests_that_come_together_wait_for_one_load():
    first, control, residency = loads()
    waiting = [asyncio.create_task(wait(first, "org/m")) for _ in range(5)]
    await eventually(lambda: residency.waiting["org/m"] == 5 and control.calls, what="5 requests waiting, a load")
    assert control.calls == [("sentence_transformer", "org/m", {"from_repository": True})]
    control.release.set()
    waited = await asyncio.gather(*waiting)
    assert all(seconds > 0 for seconds in waited)
    assert len(control.calls) == 1
    assert residency.waiting["org/m"] == 0


async def test_a_request_past_its_deadline_is_answered_while_the_load_goes_on():
    first, control, residency = loads()
    with pytest.raises(DeadlineExceeded, match="still loading"):
        await wait(first, "org/m", timeout_s=0.01)
    assert residency.waiting["org/m"] == 0
    later = asyncio.create_task(wait(first, "org/m"))
    await asyncio.sleep(0)
    control.release.set()
    await later
    assert len(control.calls) == 1  # the next request waited for the same load, never cancelled


async def test_a_failed_load_fails_its_requests_and_the_next_request_loads_again():
    first, control, _ = loads()
    control.failure = ModelNotFound("model 'org/m' is not in the repository")
    control.release.set()
    with pytest.raises(ModelNotFound):
        await wait(first, "org/m")
    control.failure = None
    await wait(first, "org/m")
    assert len(control.calls) == 2


async def test_a_clip_model_is_loaded_by_its_name_and_pretrained():
    first, control, _ = loads()
    control.release.set()
    await wait(first, "ViT-B-32:laion2b_s34b_b79k")
    assert control.calls == [("clip", "ViT-B-32", "laion2b_s34b_b79k", {"from_repository": True})]


async def test_a_name_the_repository_does_not_hold_is_never_a_metric_label():
    """A remote repository is read by the load: a name it does not hold is what a client sent,
    counted under one label of its own."""
    first, control, _ = loads()
    control.failure = ModelNotFound("model 'org/sent-by-a-client' is not in the repository")
    control.release.set()
    with pytest.raises(ModelNotFound):
        await wait(first, "org/sent-by-a-client")
    labels = {sample.labels["model"] for metric in FIRST_REQUEST_LOADS.collect() for sample in metric.samples}
    assert NOT_IN_REPOSITORY in labels and "org/sent-by-a-client" not in labels
