"""What a load request may point the converter at."""

import pytest

from embedgate.api.errors import InvalidInput, ModelNotFound
from embedgate.api.http.auth import Forbidden
from embedgate.api.models.registry import ModelRegistry
from embedgate.api.settings import Settings


def registry(**settings):
    return ModelRegistry(Settings(**settings), client=None)


def test_trust_remote_code_is_refused_unless_allowed(tmp_path):
    with pytest.raises(Forbidden):
        registry()._check_source(None, trust_remote_code=True)
    assert registry(allow_trust_remote_code=True)._check_source(None, trust_remote_code=True) is None


def test_model_path_must_be_an_existing_absolute_directory(tmp_path):
    with pytest.raises(InvalidInput):
        registry()._check_source("relative/dir", False)
    with pytest.raises(InvalidInput):  # Path.resolve() would raise ValueError: a 500
        registry()._check_source(str(tmp_path) + "/nul\0byte", False)
    with pytest.raises(ModelNotFound):
        registry()._check_source(str(tmp_path / "missing"), False)
    assert registry()._check_source(str(tmp_path), False) == str(tmp_path.resolve())


def test_model_path_is_confined_to_the_configured_directories(tmp_path):
    allowed = tmp_path / "models"
    (allowed / "mine").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    confined = registry(local_model_dirs=[allowed])
    assert confined._check_source(str(allowed / "mine"), False) == str((allowed / "mine").resolve())
    for path in (outside, allowed / "mine" / ".." / ".." / "elsewhere"):
        with pytest.raises(Forbidden):
            confined._check_source(str(path), False)
    # A symlink inside the allowed directory that leads out of it is still outside.
    (allowed / "link").symlink_to(outside)
    with pytest.raises(Forbidden):
        confined._check_source(str(allowed / "link"), False)
