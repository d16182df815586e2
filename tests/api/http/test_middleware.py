"""Body limits and content types, at the ASGI level (client disconnects: test_disconnects.py)."""

import pytest

from embedgate.api.endpoints.statuses import status_of
from embedgate.api.errors import BodyTooLarge
from embedgate.api.http.app import MULTIPART_ALLOWANCE
from embedgate.api.http.middleware import RequestLimits
from embedgate.api.settings import Settings


def test_declared_oversized_body_is_refused_before_reading(client, settings):
    body = b'{"model_name": "org/loaded", "text": ["' + b"a" * (settings.max_request_bytes + 10) + b'"]}'
    response = client.post("/infer", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_unsupported_content_types_are_415(client, content_type):
    headers = {"content-type": content_type} if content_type else {}
    response = client.post("/infer", content=b'{"model_name": "org/loaded", "text": ["a"]}', headers=headers)
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


def test_charset_parameter_is_fine(client):
    response = client.post(
        "/infer",
        content=b'{"model_name": "org/loaded", "text": ["a"]}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 200


def test_non_utf8_bytes_are_a_clear_400(client):
    response = client.post(
        "/infer",
        content=b'{"model_name": "org/loaded", "text": ["\xff\xfe\xfa"]}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_body"


async def test_streamed_body_is_cut_off_at_the_limit_without_a_length():
    received = []

    async def app(scope, receive, send):
        while True:
            message = await receive()
            received.append(len(message.get("body", b"")))
            if not message.get("more_body"):
                return

    chunks = [{"type": "http.request", "body": b"x" * 600, "more_body": True} for _ in range(10)]

    async def receive():
        return chunks.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/infer", "headers": [(b"content-type", b"application/json")]}
    with pytest.raises(BodyTooLarge) as raised:
        await RequestLimits(app, max_body_bytes=2000)(scope, receive, None)
    assert status_of(raised.value) == 413
    assert sum(received) <= 2000 and len(chunks) == 6, "kept reading past the limit"


async def test_upload_paths_have_their_own_larger_limit():
    admitted, sent = [], []

    async def app(scope, receive, send):
        admitted.append(scope["path"])

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    def post(path, length):
        return {"type": "http", "method": "POST", "path": path, "headers": [(b"content-length", str(length).encode())]}

    limits = RequestLimits(app, max_body_bytes=1000, larger={"/v1/files": 5000})
    await limits(post("/v1/files", 4000), receive, send)  # over the general limit, under its own
    await limits(post("/infer", 4000), receive, send)
    await limits(post("/v1/files", 6000), receive, send)
    assert admitted == ["/v1/files"]
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [413, 413]
    bodies = [m["body"].decode() for m in sent if m["type"] == "http.response.body"]
    assert "limit of 1000" in bodies[0] and "limit of 5000" in bodies[1]


@pytest.mark.parametrize("settings", [Settings(max_request_bytes=1024, batch_max_file_bytes=100_000)])
def test_a_batch_file_upload_is_held_to_the_file_limit_not_the_request_limit(client, settings):
    limit = settings.batch_max_file_bytes + MULTIPART_ALLOWANCE
    too_big = client.post("/v1/files", content=b"x" * (limit + 1), headers={"content-type": "multipart/form-data; boundary=b"})
    assert too_big.status_code == 413 and f"limit of {limit}" in too_big.json()["error"]["message"]
    json_body = client.post("/infer", content=b"x" * 2000, headers={"content-type": "application/json"})
    assert json_body.status_code == 413 and "limit of 1024" in json_body.json()["error"]["message"]


def test_openai_routes_get_openai_shaped_refusals(client):
    response = client.post("/v1/embeddings", content=b"input=x", headers={"content-type": "text/plain"})
    assert response.status_code == 415
    error = response.json()["error"]
    assert error["code"] == "unsupported_media_type" and error["type"] == "invalid_request_error"
    assert "param" in error
