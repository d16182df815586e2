"""The Dockerfiles and compose files, read without building anything (test_images.py
builds and runs the images): each Dockerfile copies everything the package is built
from, hadolint finds nothing, and every setting they name is a setting."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from .manifests import DOCKER, ROOT, project_version, unknown_settings

DOCKERFILES = sorted(DOCKER.glob("Dockerfile*"))
COMPOSE = DOCKER / "compose.yaml"


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each line, continuations joined, comments left out."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = (line.strip() for line in text.splitlines())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines if line and not line.startswith("#")]


def copied_sources(dockerfile: Path) -> list[str]:
    """The repository paths a Dockerfile copies from its context (not from another stage)."""
    copied = []
    for instruction, arguments in instructions(dockerfile):
        if instruction != "COPY":
            continue
        words = [word for word in shlex.split(arguments) if not word.startswith("--")]
        copied += words[:-1]
    return copied


def env(dockerfile: Path) -> dict[str, str]:
    pairs = [shlex.split(arguments) for instruction, arguments in instructions(dockerfile) if instruction == "ENV"]
    return dict(pair.split("=", 1) for words in pairs for pair in words)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_hadolint_finds_nothing(dockerfile):
    hadolint = Path(sys.executable).parent / "hadolint"
    done = subprocess.run([str(hadolint), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(dockerfile)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: path.name)
def test_the_package_builds_from_what_the_dockerfile_copies(tmp_path, dockerfile):
    """What the image installs, built from exactly the files the Dockerfile copies: a
    package folder pyproject.toml lists and the Dockerfile leaves out fails here."""
    context = tmp_path / "context"
    for source in copied_sources(dockerfile):
        target = context / source
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / source).is_dir():
            # Without what a build generates (TEI's gRPC stubs), so that this build must generate it.
            shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__", "tei_pb2*"))
        else:
            shutil.copy(ROOT / source, target)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(context)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = (tmp_path / "dist").glob("embedgate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for folder in ("api", "bench", "contract", "converters", "python_backend"):
        assert any(name.startswith(f"embedgate/{folder}/") for name in names), folder
    assert "embedgate/api/grpc/stubs/tei_pb2_grpc.py" in names


def test_a_dockerfile_that_leaves_a_package_out_is_caught(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text((DOCKER / "Dockerfile").read_text().replace("COPY contract ./contract\n", ""))
    assert "contract" not in copied_sources(dockerfile)


def test_both_images_copy_the_same_package():
    ray = copied_sources(DOCKER / "Dockerfile.ray")
    assert ray == [*copied_sources(DOCKER / "Dockerfile"), "docker/ray/serve.yaml"]


def test_every_embedgate_variable_is_a_setting():
    compose = yaml.safe_load(COMPOSE.read_text())["services"]["embedgate"]["environment"]
    names = {*env(DOCKER / "Dockerfile"), *compose}
    assert {"EMBEDGATE_MODEL_REPOSITORY", "EMBEDGATE_PORT"} <= names
    assert unknown_settings(names) == set()


def test_compose_runs_the_image_the_docs_build():
    service = yaml.safe_load(COMPOSE.read_text())["services"]["embedgate"]
    assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    assert service["image"] == f"embedgate:{project_version()}"
    # Only the gateway's port; the models and the cache on volumes where the image has them.
    assert service["ports"] == [f"{env(DOCKER / 'Dockerfile')['EMBEDGATE_PORT']}:8686"]
    assert {volume.split(":")[1] for volume in service["volumes"]} == {"/models", "/home/embedgate/.cache"}


def test_the_gpu_is_an_override_of_the_same_service():
    gpu = yaml.safe_load((DOCKER / "compose.gpu.yaml").read_text())["services"]
    assert set(gpu) == {"embedgate"} and set(gpu["embedgate"]) == {"deploy"}
    [device] = gpu["embedgate"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
