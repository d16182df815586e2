"""The bundled tritonserver's preconditions: its Python backend stub needs numpy 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from embedgate.api.triton import bundle


@pytest.mark.parametrize("version", ["1.26.4", "1.24.0"])
def test_numpy_1_is_what_the_stub_is_built_for(version):
    bundle.check_numpy(version)


@pytest.mark.parametrize("version", ["2.0.0", "2.5.2"])
def test_numpy_2_is_refused_before_triton_starts_with_the_fix(version):
    with pytest.raises(bundle.BundleError, match=r"numpy<2"):
        bundle.check_numpy(version)


def test_this_environment_passes():
    bundle.check_numpy(bundle._numpy_version(None))


def test_another_stub_python_is_asked_and_put_first_on_tritons_path(tmp_path):
    import sys

    assert bundle._numpy_version(Path(sys.executable)) == bundle._numpy_version(None)
    env = bundle._runtime_env(tmp_path, Path("/opt/stub/bin/python3"))
    assert env["PATH"].split(os.pathsep)[0] == "/opt/stub/bin"
    with pytest.raises(bundle.BundleError, match="cannot be run"):
        bundle._numpy_version(tmp_path / "missing-python")
