"""The OpenAI-compatible routes with fake parts: request and response shapes, encodings,
truncation, and OpenAI's error shape (and only on /v1)."""

from __future__ import annotations

import base64

import httpx2
import numpy as np
import openai
import pytest

from embedgate.api.http.app import create_app
from tests.api.conftest import FakeModel

# FakeEmbeddings answers row i with [3i, 3i+1, 3i+2] and counts len(text) tokens.
ROWS = np.arange(6, dtype=np.float32).reshape(2, 3)


def assert_openai_error(response, status: int, code: str, param: str | None = None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code
    assert body["error"]["param"] == param
    assert body["error"]["type"] == ("server_error" if status >= 500 else "invalid_request_error")
    assert body["error"]["message"] and "Traceback" not in response.text
    return body["error"]["message"]


def test_float_embeddings_in_openai_shape_with_usage_and_timings(client, gateway):
    response = client.post("/v1/embeddings", json={"model": "org/loaded", "input": ["ab", "cde"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["model"] == "org/loaded"
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0), ("embedding", 1)]
    np.testing.assert_array_equal([d["embedding"] for d in body["data"]], ROWS)
    assert body["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    # OpenAI's vectors are unit length: the service is always asked to normalize.
    assert gateway.embeddings.calls == [("org/loaded", ["ab", "cde"], True)]
    stages = {name: response.headers[f"x-{name}-time-ms"] for name in ("queue", "tokenize", "inference")}
    assert stages == {"queue": "0.30", "tokenize": "0.10", "inference": "0.20"}  # the service's own times
    assert float(response.headers["x-total-time-ms"]) >= 0


def test_a_single_string_and_the_user_field(client, gateway):
    response = client.post("/v1/embeddings", json={"model": "org/loaded", "input": "one", "user": "u-1"})
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 1
    assert gateway.embeddings.calls == [("org/loaded", ["one"], True)]


def test_base64_is_little_endian_float32(client):
    response = client.post(
        "/v1/embeddings", json={"model": "org/loaded", "input": ["a", "b"], "encoding_format": "base64"}
    )
    assert response.status_code == 200, response.text
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in response.json()["data"]]
    np.testing.assert_array_equal(decoded, ROWS)


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_dimensions_truncate_then_renormalize(client, encoding_format):
    response = client.post(
        "/v1/embeddings",
        json={"model": "org/loaded", "input": ["a", "b"], "dimensions": 2, "encoding_format": encoding_format},
    )
    assert response.status_code == 200, response.text
    data = [d["embedding"] for d in response.json()["data"]]
    if encoding_format == "base64":
        data = [np.frombuffer(base64.b64decode(d), dtype="<f4") for d in data]
    expected = ROWS[:, :2] / np.linalg.norm(ROWS[:, :2], axis=1, keepdims=True)
    np.testing.assert_allclose(data, expected, rtol=1e-6)


def test_dimensions_equal_to_the_models_leave_vectors_alone(client):
    response = client.post("/v1/embeddings", json={"model": "org/loaded", "input": ["a", "b"], "dimensions": 3})
    np.testing.assert_array_equal([d["embedding"] for d in response.json()["data"]], ROWS)


def test_more_dimensions_than_the_model_has_is_a_400_naming_the_parameter(client):
    response = client.post("/v1/embeddings", json={"model": "org/loaded", "input": "a", "dimensions": 4})
    assert "at most 3" in assert_openai_error(response, 400, "bad_request", "dimensions")


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": "org/loaded", "input": [1, 2, 3]}, "input"),
        ({"model": "org/loaded", "input": [[1, 2], [3]]}, "input"),
        ({"model": "org/loaded", "input": ["a", 2]}, "input.1"),
        ({"model": "org/loaded", "input": "a", "encoding_format": "int4"}, "encoding_format"),
        ({"model": "org/loaded", "input": "a", "dimensions": 0}, "dimensions"),
        ({"model": "org/loaded", "input": "a", "dimension": 2}, "dimension"),
        ({"input": "a"}, "model"),
    ],
)
def test_invalid_parameters_are_400_in_openai_shape(client, body, param):
    assert_openai_error(client.post("/v1/embeddings", json=body), 400, "invalid_request", param)


def test_token_arrays_are_refused_with_a_reason(client):
    response = client.post("/v1/embeddings", json={"model": "org/loaded", "input": [101, 2023]})
    assert "send the text" in assert_openai_error(response, 400, "invalid_request", "input")


def test_empty_input_and_too_many_inputs(client):
    assert_openai_error(client.post("/v1/embeddings", json={"model": "org/loaded", "input": []}), 400, "bad_request", "input")
    response = client.post("/v1/embeddings", json={"model": "org/loaded", "input": ["a"] * 5})
    assert "limit is 4" in assert_openai_error(response, 413, "too_many_inputs")


def test_model_errors_keep_their_status_and_code(client):
    assert_openai_error(client.post("/v1/embeddings", json={"model": "org/nothing", "input": "a"}), 404, "model_not_found")
    assert_openai_error(client.post("/v1/embeddings", json={"model": "org/on-disk", "input": "a"}), 409, "model_not_loaded")
    assert_openai_error(client.post("/v1/embeddings", json={"model": "../etc", "input": "a"}), 400, "invalid_model_name")


def test_malformed_json_unknown_routes_and_internal_errors(client, gateway):
    response = client.post("/v1/embeddings", content=b'{"model": ', headers={"content-type": "application/json"})
    assert_openai_error(response, 400, "malformed_json")
    assert_openai_error(client.post("/v1/chat/completions", json={}), 404, "not_found")

    async def boom(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    gateway.embeddings.answer = boom
    response = client.post("/v1/embeddings", json={"model": "org/loaded", "input": "a"})
    assert "request id" in assert_openai_error(response, 500, "internal_error")
    assert "secret" not in response.text


def test_routes_outside_v1_keep_the_projects_error_shape(client):
    body = client.post("/infer", json={"model_name": "org/nothing", "text": ["a"]}).json()
    assert body == {"error": {"status": 404, "code": "model_not_found", "message": body["error"]["message"]}}


def test_models_lists_the_loaded_models_and_retrieves_names_with_a_slash(client, gateway):
    gateway.registry.loaded_names = {"org/loaded", "plain"}
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in body["data"]] == [
        ("org/loaded", "model", "embedgate"),
        ("plain", "model", "embedgate"),
    ]
    assert body["data"][0]["created"] == 1767225600  # the fake's 2026-01-01T00:00:00+00:00
    assert client.get("/v1/models/org/loaded").json()["id"] == "org/loaded"
    assert_openai_error(client.get("/v1/models/org/nothing"), 404, "model_not_found")


@pytest.fixture
def openai_client(settings, gateway):
    """The official OpenAI client, talking to the app in-process."""
    app = create_app(settings)
    app.state.gateway = gateway
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://gateway")
    return openai.AsyncOpenAI(api_key="unused", base_url="http://gateway/v1", http_client=http, max_retries=0)


async def test_the_official_client_decodes_its_default_base64(openai_client, gateway):
    result = await openai_client.embeddings.create(model="org/loaded", input=["ab", "cde"])
    np.testing.assert_allclose([d.embedding for d in result.data], ROWS)
    assert result.usage.prompt_tokens == 5
    models = await openai_client.models.list()
    assert [m.id for m in models.data] == ["org/loaded"]
    assert (await openai_client.models.retrieve("org/loaded")).id == "org/loaded"


async def test_the_official_client_raises_its_own_error_classes(openai_client):
    with pytest.raises(openai.NotFoundError) as not_found:
        await openai_client.embeddings.create(model="org/nothing", input="a")
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        await openai_client.embeddings.create(model="org/loaded", input="a", dimensions=99)
    assert bad.value.param == "dimensions"


def test_a_clip_model_is_named_model_colon_pretrained(client, gateway):
    asked = []

    def served(name, pretrained=None):
        asked.append((name, pretrained))
        return FakeModel(f"{name}:{pretrained}")

    gateway.registry.served = served
    response = client.post("/v1/embeddings", json={"model": "ViT-B-32:laion2b_s34b_b79k", "input": "a photo"})
    assert response.status_code == 200, response.text
    assert asked == [("ViT-B-32", "laion2b_s34b_b79k")]
    assert response.json()["model"] == "ViT-B-32:laion2b_s34b_b79k"
    assert gateway.embeddings.calls == [("ViT-B-32:laion2b_s34b_b79k", ["a photo"], True)]


def test_a_missing_key_is_openais_401(gateway):
    from fastapi.testclient import TestClient

    from embedgate.api.settings import Settings

    app = create_app(Settings(api_keys=["secret-key"]))
    app.state.gateway = gateway  # no lifespan: nothing real is started
    keyed = TestClient(app)
    response = keyed.post("/v1/embeddings", json={"model": "org/loaded", "input": "a"})
    assert_openai_error(response, 401, "unauthorized")
    ok = keyed.post(
        "/v1/embeddings", json={"model": "org/loaded", "input": "a"}, headers={"authorization": "Bearer secret-key"}
    )
    assert ok.status_code == 200
