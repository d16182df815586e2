"""What a load request may point the converter at: a directory, a checkpoint, its own code."""

import pytest

from embedgate.api.errors import InvalidInput, ModelNotFound
from embedgate.api.http.auth import Forbidden
from embedgate.api.models.sources import check_model_path, check_pretrained, check_revision
from embedgate.api.settings import Settings


def test_trust_remote_code_is_refused_unless_allowed(tmp_path):
    with pytest.raises(Forbidden):
        check_model_path(Settings(), None, trust_remote_code=True)
    assert check_model_path(Settings(allow_trust_remote_code=True), None, trust_remote_code=True) is None


def test_model_path_must_be_an_existing_absolute_directory(tmp_path):
    with pytest.raises(InvalidInput):
        check_model_path(Settings(), "relative/dir", False)
    with pytest.raises(InvalidInput):  # Path.resolve() would raise ValueError: a 500
        check_model_path(Settings(), str(tmp_path) + "/nul\0byte", False)
    with pytest.raises(ModelNotFound):
        check_model_path(Settings(), str(tmp_path / "missing"), False)
    assert check_model_path(Settings(), str(tmp_path), False) == str(tmp_path.resolve())


def test_model_path_is_confined_to_the_configured_directories(tmp_path):
    allowed = tmp_path / "models"
    (allowed / "mine").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    confined = Settings(local_model_dirs=[allowed])
    assert check_model_path(confined, str(allowed / "mine"), False) == str((allowed / "mine").resolve())
    for path in (outside, allowed / "mine" / ".." / ".." / "elsewhere"):
        with pytest.raises(Forbidden):
            check_model_path(confined, str(path), False)
    # A symlink inside the allowed directory that leads out of it is still outside.
    (allowed / "link").symlink_to(outside)
    with pytest.raises(Forbidden):
        check_model_path(confined, str(allowed / "link"), False)


def test_pretrained_paths_are_checked(tmp_path):
    checkpoint = tmp_path / "allowed" / "model.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"weights")
    check_pretrained(Settings(), "laion2b_s34b_b79k")  # a tag: nothing to check here
    check_pretrained(Settings(), str(checkpoint))
    check_pretrained(Settings(local_model_dirs=[checkpoint.parent]), str(checkpoint))
    with pytest.raises(Forbidden):
        check_pretrained(Settings(local_model_dirs=[tmp_path / "elsewhere"]), str(checkpoint))
    with pytest.raises(ModelNotFound):
        check_pretrained(Settings(), str(tmp_path / "missing.pt"))
    with pytest.raises(InvalidInput):
        check_pretrained(Settings(), "relative/model.pt")
    with pytest.raises(InvalidInput):  # Path.resolve() would raise ValueError: a 500
        check_pretrained(Settings(), str(tmp_path / "nul\0byte.pt"))


def test_a_hub_repository_as_pretrained_is_checked_as_a_model_name():
    check_pretrained(Settings(local_model_dirs=["/nowhere"]), "hf-hub:org/tiny-clip")  # no file: no directory rule
    check_pretrained(Settings(), "hf-hub:tiny-clip")
    for bad in ("hf-hub:", "hf-hub:org/a/b", "hf-hub:org--x/y", "hf-hub:../x", "hf-hub:org/m@int8"):
        with pytest.raises(InvalidInput, match="hf-hub"):
            check_pretrained(Settings(), bad)


def test_a_revision_is_a_hub_ref_of_a_model_from_the_hub():
    for revision in (None, "main", "v1.0", "refs/pr/1", "a" * 40):
        check_revision(revision)
    check_revision("v1", pretrained="hf-hub:org/clip")
    for bad in ("", "../x", "a//b", "a/", "/a", "a b", "x" * 201, "-a"):
        with pytest.raises(InvalidInput, match="revision must be"):
            check_revision(bad)
    with pytest.raises(InvalidInput, match="model_path names a directory"):
        check_revision("v1", model_path="/srv/model")
    with pytest.raises(InvalidInput, match="hf-hub:org/name"):
        check_revision("v1", pretrained="laion2b_s34b_b79k")
