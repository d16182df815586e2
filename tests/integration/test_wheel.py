"""The built wheel, installed in a fresh venv with ``[convert]``, serves and converts.

``python -m build`` makes the wheel from a copy of the sources; a new venv gets it with
``pip install --no-index "embedgate-*.whl[convert]"``. Nothing is downloaded: the new venv
sees this environment's site-packages (a ``.pth`` line) as where its dependencies are
installed, so pip resolves every requirement of ``[convert]`` against them, and only
embedgate itself is installed into the new venv. Its ``embedgate serve`` then runs from a
directory outside the repository, so nothing is imported from the source tree.

The new venv is a user's environment that differs from this one where embedgate must fit
it: numpy 2 and protobuf 7 are installed in it first (this environment has numpy 1 and
protobuf 6), and boto3, the ``s3`` extra, is left out (the new venv cannot import it nor
botocore, as if they were not installed). So the embedded Triton, whose stub needs numpy 1,
gets an environment of its own from ``embedgate triton-runtime``, offline, from the wheels
``make install`` put in ``.venv/wheels``; ``embedgate serve`` finds it there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import cosine_rows

from .conftest import start_gateway, wait_ready

ROOT = Path(__file__).resolve().parents[2]
MODEL = "org/tiny-wheel"
# What make install downloads for this test (a user's numpy 2 and protobuf 7, Triton's runtime).
WHEELS = Path(sys.prefix) / "wheels"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
# The package folders (pyproject.toml's package-dir) and what the build reads beside them
# (setup.py: the build step that generates TEI's gRPC stubs).
SOURCES = (
    *tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values(),
    "pyproject.toml",
    "setup.py",
    "README.md",
)
# What the build makes, left out of the copy so that the build must make it.
GENERATED = ("__pycache__", "tei_pb2*")


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


@pytest.fixture(scope="module", autouse=True)
def no_pythonpath():
    """A user's new venv sees no PYTHONPATH of this run (one pointing at a checkout would
    answer the imports the wheel is installed to answer)."""
    with pytest.MonkeyPatch.context() as env:
        env.delenv("PYTHONPATH", raising=False)
        yield


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns(*GENERATED))
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
    # Every package directory of this environment (a .pth line's own .pth files are not read).
    packages = [entry for entry in sys.path if entry.endswith("site-packages")]
    (site / "dependencies.pth").write_text("".join(f"{entry}\n" for entry in packages))
    # This environment has boto3 (the test extra asks for [s3]); the new venv must not see it.
    (site / "without_s3.py").write_text(WITHOUT_S3)
    (site / "without_s3.pth").write_text("import without_s3\n")
    # numpy 2 and protobuf 7 in the new venv itself, ahead of this environment's.
    wheels = sorted(WHEELS.glob("numpy-2.*.whl"))[-1:] + sorted(WHEELS.glob("protobuf-7.*.whl"))[-1:]
    assert len(wheels) == 2, f"no numpy 2 or protobuf 7 wheel in {WHEELS}: make install downloads them"
    run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-index", "--no-deps",
        "--disable-pip-version-check", *wheels)
    run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-index",
        "--disable-pip-version-check", f"{wheel}[convert]")
    return venv


def test_the_wheel_holds_only_the_embedgate_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"embedgate", wheel.name.split("-py3")[0] + ".dist-info"}
    # The model Triton runs is shipped as a file the converter copies.
    assert "embedgate/python_backend/model.py" in names


def requirements(wheel: Path) -> dict[str, list[tuple[str, str]]]:
    """The wheel's Requires-Dist by package: (its version spec, its marker)."""
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = [line for line in archive.read(name).decode().splitlines() if line.startswith("Requires-Dist:")]
    found: dict[str, list[tuple[str, str]]] = {}
    for line in lines:
        requirement, _, marker = line.removeprefix("Requires-Dist:").partition(";")
        package = re.match(r"\s*([A-Za-z0-9_.-]+)", requirement).group(1).lower()
        found.setdefault(package, []).append((requirement[len(package) + 1:].strip(), marker.strip()))
    return found


def test_the_wheels_requirements_fit_the_users_environment(wheel):
    required = requirements(wheel)
    # Only in the extras that need them: boto3 for S3, the tritonserver (numpy<2) for an
    # embedded Triton in this environment.
    assert [marker for _, marker in required["boto3"]] == ['extra == "s3"']
    assert [marker for _, marker in required["nvidia-pytriton"]] == ['extra == "triton"']
    # Any torch from a floor on (a user's CUDA build stays), never one pinned release.
    assert all(spec.startswith(">=") and "==" not in spec for spec, _ in required["torch"]), required["torch"]
    # numpy 2 and protobuf 7 are allowed; tritonclient's grpc extra (protobuf<7) is not asked for.
    assert all("<" not in spec for spec, _ in required["numpy"] + required["protobuf"])
    assert all("grpc" not in spec for spec, _ in required["tritonclient"])


def test_without_boto3_an_s3_repository_says_what_to_install(venv):
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


@pytest.fixture(scope="module")
def cache(venv, tmp_path_factory) -> Path:
    """XDG_CACHE_HOME of the new venv's user, with the Triton runtime made in it."""
    cache = tmp_path_factory.mktemp("cache")
    made = subprocess.run(
        [venv / "bin" / "embedgate", "triton-runtime", "--find-links", WHEELS, "--no-index"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert "nvidia-pytriton 0.7.0, numpy 1." in made.stdout, made.stdout
    return cache


def test_the_new_venv_has_the_users_numpy_2_and_protobuf_7(venv):
    probe = "import numpy, google.protobuf as p; print(numpy.__version__, p.__version__, numpy.__file__)"
    numpy, protobuf, where = run(venv / "bin" / "python", "-c", probe).split()
    assert numpy.startswith("2.") and protobuf.startswith("7.") and where.startswith(str(venv)), (numpy, protobuf)


def test_without_a_triton_runtime_serve_says_how_to_make_one(venv, tmp_path):
    answer = subprocess.run(
        [venv / "bin" / "embedgate", "serve"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path), "EMBEDGATE_TRITON_WORK_DIR": str(tmp_path / "work"),
             "EMBEDGATE_MODEL_REPOSITORY": str(tmp_path / "repo"), "EMBEDGATE_PORT": "0"},
    )
    assert answer.returncode != 0
    assert "numpy 2." in answer.stderr and "embedgate triton-runtime" in answer.stderr, answer.stderr[-3000:]


def test_the_installed_wheel_converts_and_serves_a_model(venv, cache, tmp_path, tiny_dense, monkeypatch):
    """A tiny model (a conversion of seconds, MiniLM's takes half a minute here): what is
    checked is the wheel's converter and serving, not MiniLM's numbers."""
    model_path, library = tiny_dense
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    located = run(venv / "bin" / "python", "-c", "import embedgate.api, embedgate.converters as c; print(c.__file__)", cwd=outside)
    assert located.startswith(str(venv)), located
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    gateway = start_gateway(
        tmp_path / "repo", tmp_path / "gateway.log", command=[str(venv / "bin" / "embedgate"), "serve"], cwd=outside,
        triton_work_dir=str(tmp_path / "work"),
    )
    try:
        wait_ready(gateway)
        # Triton runs in the runtime's environment: its python3 first on Triton's PATH.
        (triton,) = gateway.children("tritonserver")
        environ = dict(
            line.split("=", 1) for line in Path(f"/proc/{triton}/environ").read_text().split("\0") if "=" in line
        )
        assert environ["PATH"].split(os.pathsep)[0] == str(cache / "embedgate" / f"triton-runtime-py{PY}" / "bin")
        with gateway.client(timeout=600) as http:
            loaded = http.post("/load_sentence_transformer_model", json={"model_name": MODEL, "model_path": str(model_path)})
            assert loaded.status_code == 200, loaded.text
            assert loaded.json()["converted"] is True
            # Of the tiny model's words (tests/tiny_transformers.WORDS).
            texts = ["the model server is a search server", "hello world and the quick brown fox"]
            answer = http.post("/infer", json={"model_name": MODEL, "text": texts})
            assert answer.status_code == 200, answer.text
        served = np.asarray(answer.json()["text_embeddings"], dtype=np.float32)
        assert cosine_rows(served, library.encode(texts)).min() >= 0.9999
        # The converter of the wheel copied the wheel's backend model, and the module it
        # imports, into the repository.
        assert len(list((tmp_path / "repo").glob("*/1/model.py"))) == 1
        assert len(list((tmp_path / "repo").glob("*/1/batch_layout.py"))) == 1
    finally:
        gateway.stop()
