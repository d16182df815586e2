"""The built wheel, installed in a fresh venv with ``[convert]``, serves and converts.

``python -m build`` makes the wheel from a copy of the sources; a new venv gets it with
``pip install --no-index "embedgate-*.whl[convert]"``. Nothing is downloaded: the new venv
sees this environment's site-packages (a ``.pth`` line) as where its dependencies are
installed, so pip resolves every requirement of ``[convert]`` against them, and only
embedgate itself is installed into the new venv. Its ``embedgate serve`` then runs from a
directory outside the repository, so nothing is imported from the source tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import cosine_rows

from .conftest import MINILM, start_gateway, wait_ready

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("api", "bench", "converters", "pyproject.toml", "README.md")


def run(*argv: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    # No isolation: the build backend is this environment's setuptools (nothing to fetch).
    run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, source, cwd=source)
    [built] = out.glob("embedgate-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    site = Path(run(venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-index",
        "--disable-pip-version-check", f"{wheel}[convert]")
    return venv


def test_the_wheel_holds_only_the_embedgate_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"embedgate", wheel.name.split("-py3")[0] + ".dist-info"}
    # The model Triton runs is shipped as a file the converter copies.
    assert "embedgate/api/triton/python_backend_model.py" in names


def test_the_installed_wheel_serves_and_converts_minilm(venv, tmp_path, minilm):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    located = run(venv / "bin" / "python", "-c", "import embedgate.api, embedgate.converters as c; print(c.__file__)", cwd=outside)
    assert located.startswith(str(venv)), located
    gateway = start_gateway(
        tmp_path / "repo", tmp_path / "gateway.log", command=[str(venv / "bin" / "embedgate"), "serve"], cwd=outside,
        triton_work_dir=str(tmp_path / "work"),
    )
    try:
        wait_ready(gateway)
        with gateway.client(timeout=600) as http:
            loaded = http.post("/load_sentence_transformer_model", json={"model_name": MINILM})
            assert loaded.status_code == 200, loaded.text
            assert loaded.json()["converted"] is True
            texts = ["The wheel works.", "Embeddings from an installed package."]
            answer = http.post("/infer", json={"model_name": MINILM, "text": texts})
            assert answer.status_code == 200, answer.text
        served = np.asarray(answer.json()["text_embeddings"], dtype=np.float32)
        assert cosine_rows(served, minilm.encode(texts)).min() >= 0.9999
        # The converter of the wheel copied the wheel's backend model, and the module it
        # imports, into the repository.
        assert len(list((tmp_path / "repo").glob("*/1/model.py"))) == 1
        assert len(list((tmp_path / "repo").glob("*/1/batch_layout.py"))) == 1
    finally:
        gateway.stop()
