"""The tiny models the fake hub (``tests/hub_server.py``) serves, each a directory laid out
as its hub repository holds it: sentence-transformers' own saves (``tests/tiny_models.py``)
and an OpenCLIP repository as open_clip reads an ``hf-hub:`` name (``open_clip_config.json``
beside ``open_clip_pytorch_model.bin``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.clip_model import TINY_CLIP_CONFIG, build_tiny_clip

# Not OpenCLIP's default (OpenAI's mean and std): the repository's own preprocessing is
# what a model from the hub is served with.
CLIP_PREPROCESS = {
    "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "interpolation": "bicubic", "resize_mode": "shortest",
}


def open_clip_repository(directory: Path, seed: int = 0) -> Path:
    """The tiny CLIP (random weights) as a hub repository of an OpenCLIP model."""
    built = build_tiny_clip(directory.parent / f"{directory.name}-build", seed=seed)
    directory.mkdir(parents=True, exist_ok=True)
    config = {"model_cfg": TINY_CLIP_CONFIG, "preprocess_cfg": CLIP_PREPROCESS}
    (directory / "open_clip_config.json").write_text(json.dumps(config, indent=2))
    shutil.copyfile(built.checkpoint, directory / "open_clip_pytorch_model.bin")
    (directory / "README.md").write_text("---\nlibrary_name: open_clip\n---\nA tiny CLIP for the tests.\n")
    return directory


def open_clip_reference(directory: Path):
    """The model, its eval transform and its tokenizer as open_clip gives them for the
    repository's files (what ``hf-hub:`` loads, once downloaded)."""
    import open_clip

    model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{directory}")
    return model.eval(), preprocess, open_clip.get_tokenizer(f"local-dir:{directory}")
