"""The embedded Triton reading an S3 repository: the URL as it is, the credentials inherited
(never on the command line), the region set, and a download directory of its own."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from embedgate.api.settings import Settings
from embedgate.api.triton.bundle import PreparedTriton
from embedgate.api.triton.command import Ports, build_command
from embedgate.api.triton.orphans import remove_orphaned_downloads
from embedgate.api.triton.process import TritonProcess

URL = "s3://127.0.0.1:9000/bucket/models"


def process(repository) -> TritonProcess:
    triton = TritonProcess(Settings(), repository)
    triton.prepared = PreparedTriton(
        binary=Path("/w/bin/tritonserver"), backend_dir=Path("/w/backends"), cache_dir=Path("/w/caches"),
        env=dict(os.environ), version="0.7.0",
    )
    triton.shm_prefix = "embedgate_1_test_"
    return triton


@pytest.fixture
def aws(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where download directories go
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-value")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)


def test_triton_gets_the_url_as_it_is_and_no_credentials_on_its_command_line(aws):
    triton = process(URL)
    assert triton.repository == URL
    command = build_command(triton.prepared, triton.repository, Ports(1, 2, 3), "p_", Settings())
    assert f"--model-repository={URL}" in command
    assert not any("secret-value" in arg or "key-id" in arg for arg in command)


async def test_its_environment_has_the_credentials_a_region_and_a_download_directory(aws):
    triton = process(URL)
    env = triton._environment()
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == ("key-id", "secret-value")
    # Without a region Triton's SDK would ask the EC2 metadata service for one.
    assert env["AWS_DEFAULT_REGION"] == "us-east-1"
    mount = Path(env["TRITON_AWS_MOUNT_DIRECTORY"])
    assert mount.is_dir() and mount.name.startswith("embedgate_1_test_")
    (mount / "folderX").mkdir()  # what a killed Triton leaves behind
    await triton.terminate(graceful=False)
    assert not mount.exists()


def test_aws_region_wins_over_the_default_region_as_in_aws_sdks(aws, monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert process(URL)._environment()["AWS_DEFAULT_REGION"] == "eu-west-1"
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert process(URL)._environment()["AWS_DEFAULT_REGION"] == "eu-central-1"


def test_amazon_s3_without_a_region_is_left_to_the_sdk(aws):
    env = process("s3://bucket/models")._environment()
    assert "AWS_DEFAULT_REGION" not in env


def test_a_local_repository_is_its_absolute_path_and_the_environment_is_untouched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    triton = process("repo")
    assert triton.repository == str(tmp_path.resolve() / "repo")
    assert triton._environment() is triton.prepared.env and triton.mount is None


def test_downloads_of_killed_gateways_are_removed_and_live_ones_kept(aws, tmp_path):
    finished = subprocess.Popen(["true"])
    finished.wait()
    orphaned = tmp_path / f"embedgate_{finished.pid}_0a1b2c_s3-x1"
    live = tmp_path / f"embedgate_{os.getpid()}_0a1b2c_s3-x2"
    for directory in (orphaned, live):
        (directory / "folderX" / "1").mkdir(parents=True)
    remove_orphaned_downloads()
    assert not orphaned.exists() and live.exists()
