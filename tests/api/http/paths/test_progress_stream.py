"""Loads followed live: NDJSON progress events on request, the seed's JSON otherwise."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from embedgate.api.errors import ModelNotFound
from tests.api.conftest import FakeModel

NDJSON = {"accept": "application/x-ndjson"}
BODY = {"model_name": "org/new"}


@pytest.fixture
def loads(gateway):
    """A registry load that reports progress as the real one does, then succeeds or fails."""
    outcome = {"error": None}

    async def load_sentence_transformer(
        name, model_path=None, *, trust_remote_code=False, revision=None, on_source_change="convert", progress=None
    ):
        if progress is not None:
            progress.converter_line("[  0.4s] exporting ONNX (opset 17)")
            progress.converter_line("Traceback (most recent call last):")  # never reaches a client
            progress.converter_line("  File \"/srv/secret/path.py\", line 1")
            progress.step("loading into Triton")
        if outcome["error"]:
            raise outcome["error"]
        return SimpleNamespace(model=FakeModel(name), already_loaded=False, converted=True)

    gateway.registry.load_sentence_transformer = load_sentence_transformer
    return outcome


def events(response) -> list[dict]:
    assert response.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.text.splitlines()]


def test_without_the_accept_header_the_answer_is_the_seeds_json(client, loads):
    response = client.post("/load_sentence_transformer_model", json=BODY)
    assert response.status_code == 200
    assert response.json()["status"] == "loaded" and response.json()["converted"] is True


def test_progress_steps_then_the_result(client, loads):
    response = client.post("/load_sentence_transformer_model", json=BODY, headers=NDJSON)
    assert response.status_code == 200
    lines = events(response)
    assert [(e["event"], e.get("message")) for e in lines] == [
        ("progress", "exporting ONNX (opset 17)"),
        ("progress", "loading into Triton"),
        ("done", None),
    ]
    assert all(e["elapsed_s"] >= 0 for e in lines)
    assert lines[-1]["result"] == client.post("/load_sentence_transformer_model", json=BODY).json()
    assert "secret" not in response.text and "Traceback" not in response.text


def test_a_failure_is_the_last_event_in_the_error_shape(client, loads):
    loads["error"] = ModelNotFound("model 'org/new' could not be found")
    lines = events(client.post("/load_sentence_transformer_model", json=BODY, headers=NDJSON))
    assert lines[-1]["event"] == "error"
    assert lines[-1]["error"] == {"status": 404, "code": "model_not_found", "message": "model 'org/new' could not be found"}


def test_an_internal_failure_leaks_nothing(client, loads):
    loads["error"] = RuntimeError("secret detail")
    response = client.post("/load_sentence_transformer_model", json=BODY, headers=NDJSON)
    error = events(response)[-1]["error"]
    assert error["code"] == "internal_error" and "request id" in error["message"]
    assert "secret" not in response.text


def test_a_bad_name_is_refused_before_any_stream(client, loads):
    response = client.post("/load_sentence_transformer_model", json={"model_name": "../x"}, headers=NDJSON)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_model_name"
