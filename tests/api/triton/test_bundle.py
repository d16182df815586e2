"""The bundled tritonserver's preconditions: its Python backend stub needs numpy 1, found in
the gateway's environment, in EMBEDGATE_TRITON_STUB_PYTHON's, or in a Triton runtime."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from embedgate.api.triton import bundle, runtime


@pytest.mark.parametrize("version", ["1.26.4", "1.24.0"])
def test_numpy_1_is_what_the_stub_is_built_for(version):
    bundle.check_numpy(version)


@pytest.mark.parametrize("version", ["2.0.0", "2.5.2"])
def test_numpy_2_in_the_stubs_environment_is_refused_with_the_fix(version):
    with pytest.raises(bundle.BundleError, match=r"numpy<2.*embedgate triton-runtime"):
        bundle.check_numpy(version)


def test_this_environment_runs_triton_itself():
    # The project's venv has the triton extra and numpy 1: no environment apart.
    assert bundle.stub_python_for(None) is None
    bundle.check_numpy(bundle._found_here().numpy)


def test_another_stub_python_is_asked_and_put_first_on_tritons_path(tmp_path):
    assert bundle._found_in(Path(sys.executable)) == bundle._found_here()
    assert bundle.stub_python_for(Path("/opt/stub/bin/python3")) == Path("/opt/stub/bin/python3")
    env = bundle._runtime_env(tmp_path, Path("/opt/stub/bin/python3"))
    assert env["PATH"].split(os.pathsep)[0] == "/opt/stub/bin"
    with pytest.raises(bundle.BundleError, match="cannot be run"):
        bundle._found_in(tmp_path / "missing-python")


def test_a_python_without_pytriton_is_refused_with_what_it_lacks(tmp_path):
    python = tmp_path / "python3"
    python.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named pytriton' >&2\nexit 1\n")
    python.chmod(0o755)
    with pytest.raises(bundle.BundleError, match="needs numpy and nvidia-pytriton.*pytriton"):
        bundle._found_in(python)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


def _here(numpy: str | None):
    return None if numpy is None else bundle._Found(Path("/x/pytriton"), "0.7.0", numpy, bundle._HERE)


@pytest.mark.parametrize(
    ("numpy", "why"), [("2.4.6", "numpy 2.4.6 is installed beside nvidia-pytriton"), (None, "is not installed")]
)
def test_numpy_2_or_no_pytriton_here_asks_for_a_triton_runtime(cache, monkeypatch, numpy, why):
    monkeypatch.setattr(bundle, "_found_here", lambda: _here(numpy))
    assert bundle.default_runtime() == cache / "embedgate" / f"triton-runtime-py{bundle._HERE}"
    with pytest.raises(bundle.BundleError, match="embedgate triton-runtime") as refused:
        bundle.stub_python_for(None)
    assert why in str(refused.value)
    # Once made, it is the one found.
    python = bundle.runtime_python(bundle.default_runtime())
    python.parent.mkdir(parents=True)
    python.touch()
    assert bundle.stub_python_for(None) == python


def test_the_runtime_reads_this_environments_packages_after_its_own():
    dirs = runtime.gateway_site_dirs()
    import numpy

    assert str(Path(numpy.__file__).parent.parent) in dirs
    assert all(Path(entry).name in ("site-packages", "dist-packages") for entry in dirs)
