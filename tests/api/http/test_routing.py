"""What a request that fits no route gets: 405 with Allow for a method the path does not
have, 404 for an unknown path, whatever the content type; 415 only from a route that reads
a body it was sent in the wrong content type. Always the error shape of the path."""

import pytest

from .paths.test_openai import assert_openai_error


def assert_native_error(response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(response.json()) == {"error"} and set(error) == {"status", "code", "message"}
    assert (error["status"], error["code"]) == (status, code) and error["message"]


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("PUT", "/infer", "POST"),
        ("GET", "/infer", "POST"),
        ("DELETE", "/health/ready", "GET"),
        ("POST", "/health", "GET"),
        ("PATCH", "/loaded_models", "GET"),
        ("DELETE", "/unload_model", "POST"),
        ("PUT", "/metrics/prometheus", "GET"),
    ],
)
def test_an_undeclared_method_is_405_with_allow(client, method, path, allow):
    # No content type: before, the body check answered 415 ahead of routing.
    response = client.request(method, path)
    assert_native_error(response, 405, "method_not_allowed")
    assert response.headers["allow"] == allow


@pytest.mark.parametrize(
    "method, path", [("PUT", "/v1/models"), ("POST", "/v1/models/org/loaded"), ("GET", "/v1/embeddings")]
)
def test_an_undeclared_method_on_v1_is_405_in_openai_shape(client, method, path):
    response = client.request(method, path, content=b"x", headers={"content-type": "text/plain"})
    assert_openai_error(response, 405, "method_not_allowed")
    assert response.headers["allow"]


@pytest.mark.parametrize(
    "path, allow", [("/v1/files", "GET, POST"), ("/v1/files/file-1", "DELETE, GET"), ("/v1/batches", "GET, POST")]
)
def test_a_405_names_every_method_of_its_path(client, path, allow):
    response = client.request("PUT", path)
    assert_openai_error(response, 405, "method_not_allowed")
    assert response.headers["allow"] == allow


@pytest.mark.parametrize("method", ["GET", "POST", "PUT"])
def test_an_unknown_path_is_404_whatever_the_content_type(client, method):
    response = client.request(method, "/no/such/path", content=b"x", headers={"content-type": "text/plain"})
    assert_native_error(response, 404, "not_found")


@pytest.mark.parametrize(
    "path, content_type",
    [
        ("/infer", "text/plain"),
        ("/infer", "multipart/form-data; boundary=x"),
        ("/infer", None),
        ("/unload_model", "application/x-www-form-urlencoded"),
        ("/infer_image", "application/json"),
    ],
)
def test_a_body_in_a_content_type_the_route_does_not_read_is_415(client, path, content_type):
    headers = {"content-type": content_type} if content_type else {}
    response = client.post(path, content=b'{"model_name": "org/loaded"}', headers=headers)
    assert_native_error(response, 415, "unsupported_media_type")


def test_415_on_v1_is_in_openai_shape(client):
    response = client.post("/v1/embeddings", content=b"{}", headers={"content-type": "text/plain"})
    assert_openai_error(response, 415, "unsupported_media_type")


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "application/vnd.api+json", "APPLICATION/JSON"]
)
def test_json_in_any_of_its_spellings_is_read(client, content_type):
    body = b'{"model_name": "org/loaded", "text": ["a"]}'
    assert client.post("/infer", content=body, headers={"content-type": content_type}).status_code == 200
