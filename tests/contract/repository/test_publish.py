from __future__ import annotations

from pathlib import Path

import pytest

from embedgate.contract.errors import TargetExistsError
from embedgate.contract.repository.publish import STAGING_DIR, Staging


def write_model(directory: Path, marker: str) -> None:
    (directory / "1").mkdir()
    (directory / "1" / "model.onnx").write_text(marker)
    (directory / "config.pbtxt").write_text(f'name: "{marker}"')


def entries(repository: Path) -> list[str]:
    return sorted(p.name for p in repository.iterdir())


def test_publish_moves_the_complete_directory_into_place(tmp_path):
    with Staging(tmp_path, "minilm") as stage:
        assert stage.path.parent == tmp_path / STAGING_DIR
        write_model(stage.path, "new")
        assert not (tmp_path / "minilm").exists()
        published = stage.publish()

    assert published == tmp_path / "minilm"
    assert (published / "1" / "model.onnx").read_text() == "new"
    assert entries(tmp_path) == ["minilm"]


def test_failure_leaves_no_half_model_and_no_staging(tmp_path):
    with pytest.raises(RuntimeError, match="export failed"):
        with Staging(tmp_path, "minilm") as stage:
            write_model(stage.path, "half")
            raise RuntimeError("export failed")

    assert entries(tmp_path) == []


def test_leaving_without_publish_discards_the_staging(tmp_path):
    with Staging(tmp_path, "minilm") as stage:
        write_model(stage.path, "unpublished")

    assert entries(tmp_path) == []


def test_existing_target_is_refused_before_any_work(tmp_path):
    (tmp_path / "minilm").mkdir()
    write_model(tmp_path / "minilm", "old")

    with pytest.raises(TargetExistsError, match="already exists"):
        with Staging(tmp_path, "minilm"):
            pytest.fail("the block must not run")

    assert (tmp_path / "minilm" / "1" / "model.onnx").read_text() == "old"
    assert entries(tmp_path) == ["minilm"]


def test_target_created_while_converting_is_not_overwritten(tmp_path):
    with pytest.raises(TargetExistsError):
        with Staging(tmp_path, "minilm") as stage:
            write_model(stage.path, "ours")
            (tmp_path / "minilm").mkdir()
            write_model(tmp_path / "minilm", "theirs")
            stage.publish()

    assert (tmp_path / "minilm" / "1" / "model.onnx").read_text() == "theirs"
    assert entries(tmp_path) == ["minilm"]


def test_replace_swaps_the_old_model_out(tmp_path):
    (tmp_path / "minilm").mkdir()
    write_model(tmp_path / "minilm", "old")
    (tmp_path / "minilm" / "stale.txt").write_text("from the old model")

    with Staging(tmp_path, "minilm", replace=True) as stage:
        write_model(stage.path, "new")
        stage.publish()

    assert (tmp_path / "minilm" / "1" / "model.onnx").read_text() == "new"
    assert not (tmp_path / "minilm" / "stale.txt").exists()
    assert entries(tmp_path) == ["minilm"]


def test_other_staging_work_is_left_alone(tmp_path):
    with Staging(tmp_path, "first") as first:
        with Staging(tmp_path, "second") as second:
            write_model(second.path, "second")
        assert first.path.is_dir()
        write_model(first.path, "first")
        first.publish()

    assert entries(tmp_path) == ["first"]


@pytest.mark.parametrize("name", ["", ".staging", "../escape", "a/b"])
def test_invalid_names_are_refused(tmp_path, name):
    with pytest.raises(ValueError):
        Staging(tmp_path, name)
