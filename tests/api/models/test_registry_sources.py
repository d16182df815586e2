"""The registry's decision on a load whose source differs from the repository's copy, over a
real repository (a directory, or an S3 bucket on moto_server) with a fake conversion (it
publishes what the converter would, recording the source as the converter does) and the
Triton backend over a fake Triton client."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from embedgate.api.compute.backend.triton import TritonBackend
from embedgate.api.errors import SourceChanged, TritonError
from embedgate.api.models import loading
from embedgate.api.models.registry import ModelRegistry
from embedgate.api.settings import Settings
from embedgate.contract.sources import made_from
from tests.api.conftest import fake_metadata

NAME, PART = "stale/m", "stale--m"


class FakeTritonClient:
    def __init__(self):
        self.loads: list[str] = []
        self.unloads: list[str] = []
        self.failing = False
        # An external Triton: the models it holds READY (another gateway's loads too).
        self.ready: set[str] = set()

    async def load(self, part: str) -> None:
        if self.failing:
            raise TritonError(f"failed to load '{part}'")
        self.loads.append(part)

    async def unload(self, part: str, *, wait_s: float = 30.0) -> None:
        self.unloads.append(part)

    async def repository_states(self) -> dict[str, str]:
        return {part: "READY" for part in self.ready}


@pytest.fixture
def conversions(monkeypatch):
    """The specs converted; each publishes a model whose metadata records its source."""
    specs = []

    async def convert(spec, settings, repository, parts, progress):
        specs.append(spec)
        metadata = fake_metadata(
            NAME, triton_name=spec.triton_name, made_from=made_from(spec.library, spec.model_name, spec.model_path)
        )
        for part in parts:
            with repository.stage(part, replace=spec.replace) as stage:
                tokenizer = Tokenizer(WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
                (stage.path / "tokenizer").mkdir()
                tokenizer.save(str(stage.path / "tokenizer" / "tokenizer.json"))
                (stage.path / "metadata.json").write_text(metadata.model_dump_json())
                (stage.path / "config.pbtxt").write_text(f'name: "{part}"\n')
                stage.publish()
        return metadata

    monkeypatch.setattr(loading, "convert", convert)
    return specs


def source_dir(path, config: str = '{"pooling": "max"}'):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(config)
    (path / "model.safetensors").write_bytes(b"weights of " + path.name.encode())
    return str(path)


def registry_on(repository: str, tmp_path) -> ModelRegistry:
    settings = Settings(model_repository=repository, triton_work_dir=tmp_path / "work", instance_kind="cpu")
    return ModelRegistry(settings, TritonBackend(FakeTritonClient()))


@pytest.fixture(params=["local", "s3"])
def repository(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "repository")
    return request.getfixturevalue("s3_bucket").url


def recorded(registry: ModelRegistry):
    return registry.repository.metadata(PART).made_from


async def test_a_model_loaded_from_another_directory_is_converted_again_in_place(repository, tmp_path, conversions):
    a, b = source_dir(tmp_path / "a"), source_dir(tmp_path / "b", '{"pooling": "weightedmean"}')
    registry = registry_on(repository, tmp_path)
    first = await registry.load_sentence_transformer(NAME, a)
    assert first.converted and recorded(registry).location == a
    await registry.unload(NAME)

    again = await registry.load_sentence_transformer(NAME, b)
    assert again.converted and not again.already_loaded
    assert [spec.replace for spec in conversions] == [False, True]
    assert recorded(registry).location == b and again.model.metadata.made_from.location == b

    same = await registry.load_sentence_transformer(NAME, b)
    assert (same.converted, same.already_loaded, len(conversions)) == (False, True, 2)
    await registry.unload(NAME)
    not_loaded = await registry.load_sentence_transformer(NAME, b)
    assert (not_loaded.converted, not_loaded.already_loaded, len(conversions)) == (False, False, 2)


async def test_refused_where_the_load_says_so_naming_both_and_changing_nothing(repository, tmp_path, conversions):
    a, b = source_dir(tmp_path / "a"), source_dir(tmp_path / "b", '{"pooling": "weightedmean"}')
    registry = registry_on(repository, tmp_path)
    served = (await registry.load_sentence_transformer(NAME, b)).model
    with pytest.raises(SourceChanged) as refused:
        await registry.load_sentence_transformer(NAME, a, on_source_change="refuse")
    assert a in refused.value.message and b in refused.value.message
    assert len(conversions) == 1 and registry.held(NAME) is served and recorded(registry).location == b
    # The same source with the same option: an ordinary load.
    assert (await registry.load_sentence_transformer(NAME, b, on_source_change="refuse")).already_loaded


async def test_a_loaded_model_retrained_in_place_is_replaced_with_new_serials(tmp_path, conversions):
    b = source_dir(tmp_path / "b")
    registry = registry_on(str(tmp_path / "repository"), tmp_path)
    old = (await registry.load_sentence_transformer(NAME, b)).model
    (tmp_path / "b" / "model.safetensors").write_bytes(b"retrained weights")
    outcome = await registry.load_sentence_transformer(NAME, b)
    assert outcome.converted and not outcome.already_loaded and conversions[-1].replace
    new = registry.held(NAME)
    assert new is outcome.model is not old
    # Loaded again in Triton (from the new files); never unloaded in between.
    assert registry.backend.client.loads == [PART, PART] and registry.backend.client.unloads == []
    # The response cache keys rows by route serial: the new copy's are its own.
    assert {route.serial for route in new.routes}.isdisjoint(route.serial for route in old.routes)
    assert registry.manifest() == [NAME]


async def test_a_replacement_triton_cannot_load_leaves_the_model_unserved(tmp_path, conversions):
    b = source_dir(tmp_path / "b")
    registry = registry_on(str(tmp_path / "repository"), tmp_path)
    await registry.load_sentence_transformer(NAME, b)
    (tmp_path / "b" / "config.json").write_text('{"pooling": "cls"}')
    registry.backend.client.failing = True
    with pytest.raises(TritonError):
        await registry.load_sentence_transformer(NAME, b)
    # Never the old copy's tokenizer and metadata over what Triton holds now.
    assert registry.held(NAME) is None and registry.backend.client.unloads == [PART] and registry.manifest() == []


async def test_a_load_by_name_alone_or_a_restore_serves_the_repositorys_copy(tmp_path, conversions):
    a = source_dir(tmp_path / "a")
    registry = registry_on(str(tmp_path / "repository"), tmp_path)
    await registry.load_sentence_transformer(NAME, a)
    await registry.unload(NAME)
    source_dir(tmp_path / "a", '{"pooling": "changed"}')
    # No model_path: the name is what the repository holds, whatever its directory became.
    assert not (await registry.load_sentence_transformer(NAME)).converted
    await registry.unload(NAME)
    # A restart's manifest (and a replica's desired state) brings back what was decided.
    assert not (await registry.restore(NAME)).converted
    assert len(conversions) == 1


async def test_a_copy_converted_before_sources_were_recorded_serves_as_before(tmp_path, conversions):
    registry = registry_on(str(tmp_path / "repository"), tmp_path)
    await registry.load_sentence_transformer(NAME, source_dir(tmp_path / "a"))
    await registry.unload(NAME)
    old = registry.repository.metadata(PART).model_copy(update={"made_from": None})
    (tmp_path / "repository" / PART / "metadata.json").write_text(old.model_dump_json())
    outcome = await registry.load_sentence_transformer(NAME, source_dir(tmp_path / "b", '{"other": 1}'))
    assert not outcome.converted and outcome.model.metadata.made_from is None and len(conversions) == 1


async def test_another_process_serving_the_old_copy_takes_the_new_one_on_refresh(tmp_path, conversions):
    """Ray replicas share the repository, each with its own Triton: the one that took the
    load converts again; the others follow the desired state with refresh."""
    repository = str(tmp_path / "repository")
    deciding, following = registry_on(repository, tmp_path), registry_on(repository, tmp_path)
    await deciding.load_sentence_transformer(NAME, source_dir(tmp_path / "a"))
    old = await following.restore(NAME)
    await following.refresh(NAME)
    assert following.held(NAME) is old.model and following.backend.client.loads == [PART]  # the same copy: nothing to do

    await deciding.load_sentence_transformer(NAME, source_dir(tmp_path / "b", '{"pooling": "weightedmean"}'))
    await following.refresh(NAME)
    assert following.held(NAME).metadata.made_from.location == str(tmp_path / "b")
    assert following.backend.client.loads == [PART, PART] and len(conversions) == 2


async def test_a_copy_converted_again_is_loaded_even_where_an_external_triton_holds_the_old(tmp_path, conversions):
    """Another gateway on the same external Triton serves the old copy: it is loaded anew."""
    registry = registry_on(str(tmp_path / "repository"), tmp_path)
    registry.backend.triton = SimpleNamespace(embedded=False, restarts=0, serving=True)
    registry.backend.client.ready.add(PART)
    await registry.load_sentence_transformer(NAME, source_dir(tmp_path / "a"))
    assert registry.backend.client.loads == [PART]  # just converted: whatever Triton held is older
    await registry.unload(NAME)
    await registry.load_sentence_transformer(NAME, source_dir(tmp_path / "a"))
    assert registry.backend.client.loads == [PART]  # the same copy, READY there: served as it is
    await registry.unload(NAME)
    await registry.load_sentence_transformer(NAME, source_dir(tmp_path / "b", '{"pooling": "cls"}'))
    assert registry.backend.client.loads == [PART, PART]
