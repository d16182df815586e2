"""The built wheel, installed in a fresh venv with ``[convert]``, serves and converts.

``python -m build`` makes the wheel from a copy of the sources; a new venv gets it with
``pip install --no-index "embedgate-*.whl[convert]"``. Nothing is downloaded: the new venv
sees this environment's site-packages (a ``.pth`` line) as where its dependencies are
installed, so pip resolves every requirement of ``[convert]`` against them, and only
embedgate itself is installed into the new venv. Its ``embedgate serve`` then runs from a
directory outside the repository, so nothing is imported from the source tree.

boto3 is the ``s3`` extra, left out here: the new venv cannot import it (nor botocore),
as if it were not installed, and still serves and converts with a local repository.
"""

from __future__ import annotations

import os
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


# Imported first by the new venv's Python (a .pth line): boto3 and botocore are not there.
WITHOUT_S3 = """
import sys


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("boto3", "botocore", "s3transfer"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
"""


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
    # This environment has boto3 (the test extra asks for [s3]); the new venv must not see it.
    (site / "without_s3.py").write_text(WITHOUT_S3)
    (site / "without_s3.pth").write_text("import without_s3\n")
    run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-index",
        "--disable-pip-version-check", f"{wheel}[convert]")
    return venv


def test_the_wheel_holds_only_the_embedgate_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"embedgate", wheel.name.split("-py3")[0] + ".dist-info"}
    # The model Triton runs is shipped as a file the converter copies.
    assert "embedgate/api/triton/python_backend_model.py" in names


def test_boto3_is_only_the_s3_extra_and_torch_is_not_pinned(wheel, venv):
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [line for line in archive.read(name).decode().splitlines() if line.startswith("Requires-Dist:")]
    boto3 = [line for line in requires if line.split()[1].startswith("boto3")]
    assert boto3 and all("extra == \"s3\"" in line for line in boto3), boto3
    torch = [line for line in requires if line.split()[1].startswith("torch")]
    # Any torch from a floor on (a user's CUDA build stays), never one pinned release.
    assert torch and all(">=" in line.split(";")[0] and "==" not in line.split(";")[0] for line in torch), torch
    probe = "import importlib.util as u; print(u.find_spec('boto3'))"
    with pytest.raises(AssertionError, match="No module named 'boto3'"):
        run(venv / "bin" / "python", "-c", probe)
    # Asking for an S3 repository without it: a setting error that says what to install.
    answer = subprocess.run(
        [venv / "bin" / "embedgate", "serve"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "EMBEDGATE_MODEL_REPOSITORY": "s3://127.0.0.1:9/bucket/models"},
    )
    assert answer.returncode != 0
    assert 'pip install "embedgate[s3]"' in answer.stdout + answer.stderr, answer.stderr[-2000:]
    assert "Traceback" not in answer.stderr


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
