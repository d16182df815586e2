"""Whether a conversion may reach the hub: the server's setting decides, over what the
environment says."""

import os

from embedgate.converters import hub_access


def test_off_nothing_reaches_the_hub_and_on_the_environments_offline_gives_way(monkeypatch):
    # Each set back as it was after the test.
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_TELEMETRY"):
        monkeypatch.delenv(name, raising=False)
    hub_access.configure(False)
    assert os.environ["HF_HUB_OFFLINE"] == os.environ["TRANSFORMERS_OFFLINE"] == "1"
    # A server allowed to download, whose environment says offline (a base image's default).
    hub_access.configure(True)
    assert "HF_HUB_OFFLINE" not in os.environ and "TRANSFORMERS_OFFLINE" not in os.environ
    # huggingface_hub's own bars would interleave with the progress lines: ours tell the download.
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1"
