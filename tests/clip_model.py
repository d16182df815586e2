"""A small OpenCLIP model for the tests: an architecture config and random weights saved as a
checkpoint, built at test time (no hub, a few MB)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TINY_CLIP = "embedgate-tiny-clip"
# A real CLIP layout (ViT image tower, causal text transformer with argmax pooling,
# the CLIP tokenizer's vocabulary) at a fraction of the size. The context length is short
# so that truncation is easy to reach; the image size is not square to exercise that path.
TINY_CLIP_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": [48, 64], "layers": 2, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


@dataclass(frozen=True)
class TinyClip:
    model_name: str
    config_dir: Path  # holds <model_name>.json: EMBEDGATE_CLIP_MODEL_CONFIG_DIR
    checkpoint: Path  # pretrained=<this path>


def build_tiny_clip(directory: Path, seed: int = 0) -> TinyClip:
    from embedgate.converters.torch_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import open_clip
    import torch

    config_dir = directory / "configs"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / f"{TINY_CLIP}.json").write_text(json.dumps(TINY_CLIP_CONFIG))
    open_clip.add_model_config(config_dir)
    torch.manual_seed(seed)
    model = open_clip.create_model(TINY_CLIP)
    checkpoint = directory / f"tiny-clip-{seed}.pt"
    torch.save(model.state_dict(), checkpoint)
    return TinyClip(TINY_CLIP, config_dir, checkpoint)


def reference_model(tiny: TinyClip):
    """The PyTorch model, its eval transform and its tokenizer, as a user of open_clip gets them."""
    from embedgate.converters.torch_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import open_clip

    open_clip.add_model_config(tiny.config_dir)
    model, _, preprocess = open_clip.create_model_and_transforms(tiny.model_name, pretrained=str(tiny.checkpoint))
    return model.eval(), preprocess, open_clip.get_tokenizer(tiny.model_name)
