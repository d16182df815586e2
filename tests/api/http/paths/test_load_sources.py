"""What a load request says about a changed source, and what the listings show of a model's
source, with fake parts: on_source_change reaches the registry, its 409 comes back in the
one error shape, and made_from is listed (null for a model converted before it was recorded)."""

from __future__ import annotations

import pytest

from embedgate.api.errors import SourceChanged
from embedgate.api.models.control import LoadOutcome
from embedgate.contract.sources import ModelSource
from tests.api.conftest import FakeModel, fake_metadata

from .test_inference import assert_error

SOURCE = ModelSource(type="directory", location="/srv/models/b", fingerprint="sha256:" + "b" * 64)


@pytest.fixture
def asked(gateway):
    """Each load's on_source_change, as the registry got it; "refuse" is refused."""
    options = []

    async def load(*names, on_source_change="convert", **_):
        options.append(on_source_change)
        if on_source_change == "refuse":
            raise SourceChanged("model 'stale/m' in the repository was converted from directory /srv/models/a ...")
        return LoadOutcome(FakeModel(names[0], changes={"made_from": SOURCE}), already_loaded=False, converted=True)

    gateway.models.load_sentence_transformer = load
    gateway.models.load_clip = load
    return options


def test_on_source_change_reaches_the_registry_and_a_refusal_is_a_409(client, asked):
    path, body = "/load_sentence_transformer_model", {"model_name": "stale/m", "model_path": "/srv/models/b"}
    answer = client.post(path, json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["made_from"] == SOURCE.model_dump()
    message = assert_error(client.post(path, json={**body, "on_source_change": "refuse"}), 409, "source_changed")
    assert "/srv/models/a" in message
    assert asked == ["convert", "refuse"]


def test_a_clip_load_passes_its_option_too(client, asked):
    body = {"model_name": "ViT-B-32", "pretrained": "/srv/models/b.pt", "on_source_change": "refuse"}
    assert_error(client.post("/load_clip_model", json=body), 409, "source_changed")
    assert asked == ["refuse"]


@pytest.mark.parametrize("value", ["keep", "", None, True])
def test_an_unknown_choice_is_a_422(client, asked, value):
    body = {"model_name": "stale/m", "on_source_change": value}
    assert "on_source_change" in assert_error(client.post("/load_sentence_transformer_model", json=body), 422, "invalid_request")
    assert asked == []


def test_the_listings_show_what_a_model_was_made_from(client, gateway):
    gateway.registry.changes["org/loaded"] = {"made_from": SOURCE}
    loaded = client.get("/loaded_models").json()["models"]
    assert [model["made_from"] for model in loaded] == [SOURCE.model_dump()]

    async def on_disk():
        return [fake_metadata("org/loaded", made_from=SOURCE), fake_metadata("org/old")]

    gateway.registry.on_disk = on_disk
    listed = {model["model_name"]: model["made_from"] for model in client.get("/repository_models").json()["models"]}
    # A model converted before sources were recorded: null, its source unknown.
    assert listed == {"org/loaded": SOURCE.model_dump(), "org/old": None}


def test_the_schema_documents_the_option_and_the_409(client):
    schema = client.get("/openapi.json").json()
    request = schema["components"]["schemas"]["LoadSentenceTransformerRequest"]["properties"]["on_source_change"]
    assert request["enum"] == ["convert", "refuse"] and request["default"] == "convert"
    assert "409" in schema["paths"]["/load_sentence_transformer_model"]["post"]["responses"]
    assert "made_from" in schema["components"]["schemas"]["ModelInfo"]["properties"]
