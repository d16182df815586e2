"""A gateway whose conversions download from the fake hub (``tests/hub_server.py``): downloads
allowed (EMBEDGATE_ALLOW_HUB_DOWNLOAD), ``HF_ENDPOINT`` at the fake hub on 127.0.0.1, the hub
cache under an ``HF_HOME`` of the test's own (no other cache variable inherited), and the
gateway's environment being what its conversions inherit: ``HF_TOKEN`` (or none) and
huggingface_hub's timeouts. ``HF_HUB_OFFLINE=1`` stays in it, as the tests' environment sets
it: the server's setting decides (``converters/hub_access.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.hub_server import FakeHub

from .conftest import Gateway, start_gateway

# What huggingface_hub or sentence-transformers would read a cache or a token from otherwise.
INHERITED = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "SENTENCE_TRANSFORMERS_HOME", "HF_TOKEN_PATH", "HF_XET_CACHE")
# A server's token (its HF_TOKEN): a gated repository's files need it granted.
HUB_TOKEN = "hf_embedgate_tests_token"


@dataclass
class HubGateway:
    gateway: Gateway
    hub: FakeHub
    home: Path  # HF_HOME

    @property
    def cache(self) -> Path:
        return self.home / "hub"

    def snapshot(self, repo_id: str, commit: str) -> Path:
        return self.cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit

    def blobs(self, repo_id: str) -> list[Path]:
        folder = self.cache / f"models--{repo_id.replace('/', '--')}" / "blobs"
        return sorted(folder.iterdir()) if folder.is_dir() else []


def start_hub_gateway(tmp_path_factory, hub: FakeHub, name: str, token: str | None = None, **env: str) -> HubGateway:
    """A gateway downloading from ``hub``, with ``token`` as its HF_TOKEN and ``env`` besides."""
    home = tmp_path_factory.mktemp(f"{name}-hf-home")
    variables: dict[str, str | None] = {
        "HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_TOKEN": token, **dict.fromkeys(INHERITED), **env,
    }
    gateway = start_gateway(
        tmp_path_factory.mktemp(f"{name}-repository"), tmp_path_factory.mktemp("logs") / f"{name}.log",
        env=variables, allow_hub_download="true", converter_warm_s="3600",
    )
    return HubGateway(gateway, hub, home)
