"""Whether a conversion may reach the model hub, told to huggingface_hub and transformers
the only way they listen: environment variables, read once when they are imported.

The server's setting decides (EMBEDGATE_ALLOW_HUB_DOWNLOAD): off, nothing may reach the hub
(``HF_HUB_OFFLINE``); on, the hub is reached even where the server's environment says
``HF_HUB_OFFLINE`` (a base image's default), at ``HF_ENDPOINT`` where that is set, with the
token huggingface_hub finds (``HF_TOKEN``, else its login's token file under ``HF_HOME``),
within its timeouts (``HF_HUB_DOWNLOAD_TIMEOUT``, ``HF_HUB_ETAG_TIMEOUT``)."""

from __future__ import annotations

import os

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def configure(allow_network: bool) -> None:
    # huggingface_hub and transformers read these once, at import: set them first.
    for name in OFFLINE_VARIABLES:
        if allow_network:
            os.environ.pop(name, None)
        else:
            os.environ[name] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    # Their progress bars would interleave with our progress lines on stderr: a download's
    # progress is told as our own lines (converters/hub/progress.py).
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
