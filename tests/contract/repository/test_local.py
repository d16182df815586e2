"""A model repository in a local directory: the default, shared with Triton by path."""

import json

import pytest

from embedgate.contract.errors import TargetExistsError
from embedgate.contract.repository import LocalRepository, open_repository
from embedgate.contract.repository.publish import STAGING_DIR

from .staged import metadata, write_model


@pytest.fixture
def repository(tmp_path):
    return open_repository(tmp_path / "repo")


def test_opened_from_a_path_it_is_local_and_named_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repository = open_repository("repo")
    assert isinstance(repository, LocalRepository) and not repository.remote
    assert repository.location == str(tmp_path.resolve() / "repo")


def test_published_model_is_listed_read_and_its_own_local_copy(repository):
    with repository.stage("minilm") as stage:
        write_model(stage.path, "minilm")
        assert not repository.exists("minilm")
        stage.publish()
    assert repository.exists("minilm")
    assert repository.names() == ["minilm"]
    assert repository.metadata("minilm") == metadata("minilm")
    local = repository.fetch("minilm")
    assert local == repository.root / "minilm" and (local / "tokenizer" / "tokenizer.json").is_file()


def test_a_name_taken_is_refused_before_any_work(repository):
    with repository.stage("minilm") as stage:
        write_model(stage.path, "minilm")
        stage.publish()
    with pytest.raises(TargetExistsError):
        with repository.stage("minilm"):
            pytest.fail("the block must not run")


def test_listing_skips_files_and_dot_directories_and_bad_metadata_reads_as_none(repository):
    (repository.root / ".staging" / "x").mkdir(parents=True)
    (repository.root / "not-a-model.txt").write_text("x")
    (repository.root / "foreign").mkdir()
    (repository.root / "foreign" / "metadata.json").write_text("{not json")
    assert repository.names() == ["foreign"]
    assert repository.metadata("foreign") is None and repository.metadata("absent") is None


def test_delete_removes_the_model_and_tolerates_a_missing_one(repository):
    with repository.stage("minilm") as stage:
        write_model(stage.path, "minilm")
        stage.publish()
    repository.delete("minilm")
    repository.delete("minilm")
    assert sorted(p.name for p in repository.root.iterdir()) == []


def test_remove_partial_takes_exactly_this_models_staging(repository):
    staging = repository.root / STAGING_DIR
    for leftover in ("minilm-0123456789ab", "minilm-other-0123456789ab"):
        (staging / leftover).mkdir(parents=True)
    repository.remove_partial("minilm")
    assert [p.name for p in staging.iterdir()] == ["minilm-other-0123456789ab"]
    repository.remove_partial("minilm-other")
    assert not staging.exists()


def test_manifest_round_trip_and_garbage_reads_as_empty(repository):
    assert repository.read_manifest() == []
    repository.write_manifest(["a/b", "c"])
    assert repository.read_manifest() == ["a/b", "c"]
    assert json.loads((repository.root / ".embedgate-loaded.json").read_text()) == ["a/b", "c"]
    (repository.root / ".embedgate-loaded.json").write_text('{"not": "a list"}')
    assert repository.read_manifest() == []
