"""An OpenCLIP model from a hub repository (``hf-hub:org/name``), as the converter loads it:
downloaded as any hub model, and refused where the repository holds no OpenCLIP model or
downloads are off (the happy path, through the real API: ``tests/integration/test_hub_downloads.py``)."""

from __future__ import annotations

import pytest

from embedgate.contract import errors
from embedgate.contract.spec import ConversionSpec
from embedgate.converters.kinds.clip import converter
from tests.hub_server import FakeHub


@pytest.fixture
def hub(tmp_path):
    server = FakeHub()
    files = tmp_path / "not-clip"
    files.mkdir()
    (files / "config.json").write_text('{"model_type": "bert"}')
    (files / "model.safetensors").write_bytes(b"\0" * 64)
    server.add("org/not-clip", {"main": files})
    yield server
    server.stop()


def spec(repo_id: str, allow_network: bool) -> ConversionSpec:
    return ConversionSpec(library="open_clip", model_name="served-name", pretrained=f"hf-hub:{repo_id}",
                          triton_name="x", repository="/unused", allow_network=allow_network)


def test_a_repository_without_an_open_clip_config_is_no_open_clip_model(hub, hub_online, monkeypatch):
    monkeypatch.setattr(converter, "fetch", lambda *a, **k: _fetch(hub, *a, **k))
    refused = "'org/not-clip' is no OpenCLIP model: it needs open_clip_config"
    with pytest.raises(errors.ModelNotFoundError, match=refused):
        converter.load(spec("org/not-clip", True), lambda *args: None)


def test_downloads_off_and_not_in_the_cache(hub, hub_online):
    with pytest.raises(errors.HubDownloadsDisabled, match="EMBEDGATE_ALLOW_HUB_DOWNLOAD"):
        converter.load(spec("org/not-clip", False), lambda *args: None)
    assert hub.requests == []


def _fetch(hub, repo_id, revision, **options):
    from embedgate.converters.hub.snapshot import fetch

    return fetch(repo_id, revision, **options, endpoint=hub.url)
