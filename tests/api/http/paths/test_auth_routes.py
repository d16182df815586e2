"""Keys enforced per router over the real app (fake gateway behind it)."""

import pytest
from fastapi.testclient import TestClient

from embedgate.api.http.app import create_app
from embedgate.api.settings import Settings
from tests.api.conftest import FakeGateway


@pytest.fixture
def secured():
    settings = Settings(api_keys=["user-key"], admin_keys=["admin-key"])
    app = create_app(settings)
    gateway = FakeGateway(settings)
    app.state.gateway = gateway
    return TestClient(app, raise_server_exceptions=False), gateway


def bearer(key):
    return {"authorization": f"Bearer {key}"}


def test_health_and_docs_stay_open(secured):
    client, _ = secured
    assert client.get("/health").status_code == 200
    assert client.get("/health/ready").status_code == 200
    assert client.get("/docs").status_code == 200


@pytest.mark.parametrize("method, path", [("post", "/infer"), ("get", "/metrics"), ("get", "/loaded_models")])
def test_inference_and_reads_need_a_key(secured, method, path):
    client, _ = secured
    kwargs = {"json": {"model_name": "org/loaded", "text": ["a"]}} if method == "post" else {}
    response = getattr(client, method)(path, **kwargs)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"
    assert getattr(client, method)(path, headers=bearer("user-key"), **kwargs).status_code == 200


def test_management_needs_the_admin_key(secured):
    client, gateway = secured
    body = {"model_name": "org/loaded"}
    assert client.post("/unload_model", json=body).status_code == 401
    forbidden = client.post("/unload_model", json=body, headers=bearer("user-key"))
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"
    admin = client.post("/unload_model", json=body, headers=bearer("admin-key"))
    assert admin.status_code == 200 and gateway.registry.unloaded == ["org/loaded"]


def test_with_admin_keys_alone_inference_needs_an_admin_key():
    settings = Settings(admin_keys=["admin-key"])
    app = create_app(settings)
    app.state.gateway = FakeGateway(settings)
    client = TestClient(app, raise_server_exceptions=False)
    body = {"model_name": "org/loaded", "text": ["a"]}
    assert client.post("/infer", json=body).status_code == 401
    assert client.post("/infer", json=body, headers=bearer("admin-key")).status_code == 200
    assert client.get("/health/ready").status_code == 200
