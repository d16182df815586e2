"""A load that waits for another load of the same model follows it: its client hears the
running load's steps as they come, then its own answer (already loaded, converted once)."""

from __future__ import annotations

import asyncio

from embedgate.api.models import loading
from embedgate.api.models.progress import Progress

from .test_registry_sources import NAME, conversions, registry_on, source_dir  # noqa: F401


def held_conversions(monkeypatch, tmp_path):
    """A registry whose conversions (the fake's) say one step, then wait for the event;
    the registry, the source directory and the event."""
    registry = registry_on(str(tmp_path / "repository"), tmp_path)
    release = asyncio.Event()
    fake_convert = loading.convert

    async def slow_convert(spec, settings, repository, parts, progress):
        progress.step("exporting ONNX")
        await release.wait()
        return await fake_convert(spec, settings, repository, parts, progress)

    monkeypatch.setattr(loading, "convert", slow_convert)
    return registry, source_dir(tmp_path / "m"), release


async def test_a_second_load_of_a_model_follows_the_first_until_its_turn(tmp_path, conversions, monkeypatch):  # noqa: F811
    registry, directory, release = held_conversions(monkeypatch, tmp_path)
    heard: dict[str, list[str]] = {"first": [], "second": []}
    progress = {who: Progress(NAME) for who in heard}
    for who, events in heard.items():
        progress[who].listen(lambda event, events=events: events.append(event["message"]))

    first = asyncio.create_task(registry.load_sentence_transformer(NAME, directory, progress=progress["first"]))
    while heard["first"] != ["exporting ONNX"]:
        await asyncio.sleep(0)
    second = asyncio.create_task(registry.load_sentence_transformer(NAME, directory, progress=progress["second"]))
    while "waiting for the load of this model under way" not in heard["second"]:
        await asyncio.sleep(0)
    release.set()
    outcomes = await asyncio.gather(first, second)

    assert [(o.converted, o.already_loaded) for o in outcomes] == [(True, False), (False, True)]
    assert len(conversions) == 1
    assert heard["first"] == ["exporting ONNX", "loading into Triton", "ready"]
    # The first load's steps after the second began waiting, as they came; nothing after its turn.
    assert heard["second"] == ["waiting for the load of this model under way", "loading into Triton", "ready"]
    assert registry.loads._running == {}


async def test_a_waiting_load_cancelled_stops_following(tmp_path, conversions, monkeypatch):  # noqa: F811
    registry, directory, release = held_conversions(monkeypatch, tmp_path)
    running = Progress(NAME)
    first = asyncio.create_task(registry.load_sentence_transformer(NAME, directory, progress=running))
    while NAME.replace("/", "--") not in registry.loads._running:
        await asyncio.sleep(0)
    follower = Progress(NAME)
    second = asyncio.create_task(registry.load_sentence_transformer(NAME, directory, progress=follower))
    while follower.relay not in running._listeners:
        await asyncio.sleep(0)
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    assert follower.relay not in running._listeners
    release.set()
    assert (await first).converted
