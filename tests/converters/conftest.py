"""Fixtures for the converter tests: real conversions through ``python -m embedgate.converters``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.converters import forked

REPO_ROOT = Path(__file__).resolve().parents[2]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


# --- running `python -m embedgate.converters` ---


@dataclass
class ConversionRun:
    returncode: int
    stdout: str
    stderr: str
    repository: Path

    @property
    def last_line(self) -> dict:
        return json.loads(self.stdout.strip().splitlines()[-1])


def run_converter(spec: dict, timeout: float = 600) -> ConversionRun:
    """One conversion as ``python -m embedgate.converters`` runs it, forked from this test
    process's warm converter (``tests/converters/forked.py``)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    code, stdout, stderr = forked.converter(REPO_ROOT, env).run(json.dumps(spec).encode(), timeout)
    return ConversionRun(code, stdout, stderr, Path(spec["repository"]))


@pytest.fixture(scope="session")
def run_conversion():
    """``run_conversion(spec_dict)``: run ``python -m embedgate.converters`` in a subprocess."""
    return run_converter


@pytest.fixture(scope="session")
def minilm_conversion(tmp_path_factory: pytest.TempPathFactory) -> ConversionRun:
    """The offline MiniLM, converted once per session (python form)."""
    repository = tmp_path_factory.mktemp("model_repository")
    return run_converter({"model_name": MINILM, "triton_name": "minilm", "repository": str(repository)})



@pytest.fixture
def hub_online(monkeypatch, tmp_path):
    """huggingface_hub in this process as a conversion allowed to download has it: not
    offline, its cache the test's own (SENTENCE_TRANSFORMERS_HOME), no token. A test passes
    the fake hub's URL (``tests/hub_server.py``) as the endpoint: nothing leaves 127.0.0.1."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return tmp_path / "hub-cache"
