"""Whether a conversion may reach the model hub, told to huggingface_hub and transformers
the only way they listen: environment variables, read once when they are imported."""

from __future__ import annotations

import os


def configure(allow_network: bool) -> None:
    # huggingface_hub and transformers read these once, at import: set them first.
    if not allow_network:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    # Progress bars would interleave with our progress lines on stderr.
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
