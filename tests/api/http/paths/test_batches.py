"""The Files and Batch APIs with keys, over the real job service, coordinator and SQLite
store (no chunk runner runs: batches stay in progress): each key finds only its own files and
batches, another key's id is not found in the very words of an unknown one and nothing of
it changes, an admin key finds and manages all; without keys, everything is everyone's."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from embedgate.api.http.app import create_app
from embedgate.api.jobs.chunks import Measure
from embedgate.api.jobs.coordinator import Coordinator
from embedgate.api.jobs.files import LocalFiles
from embedgate.api.jobs.queue import LocalQueue
from embedgate.api.jobs.service import JobService
from embedgate.api.jobs.store import JobStore
from embedgate.api.settings import Settings
from tests.api.conftest import FakeGateway

KEYS = {"alice": "alice-key", "bob": "bob-key", "admin": "admin-key"}


class Endpoint:
    url = "/v1/embeddings"

    def measure(self, body):
        return Measure(body["model"], 1, len(body["input"]))


def server(tmp_path, settings: Settings) -> tuple[TestClient, JobStore]:
    app = create_app(settings)
    gateway = FakeGateway(settings)
    store = JobStore(tmp_path / "jobs.sqlite3")
    files = LocalFiles(tmp_path / "files")
    queue = LocalQueue(Coordinator(store, files, lease_s=60))
    gateway.jobs = JobService(
        settings, queue, files, {Endpoint.url: Endpoint()}, is_served=lambda model: True, ready=lambda: True
    )
    app.state.gateway = gateway
    return TestClient(app, raise_server_exceptions=False), store


@pytest.fixture
def keyed(tmp_path):
    client, store = server(tmp_path, Settings(api_keys=[KEYS["alice"], KEYS["bob"]], admin_keys=[KEYS["admin"]]))
    yield client
    store.close()


def as_(who):
    return {"authorization": f"Bearer {KEYS[who]}"}


def upload_and_run(client, headers) -> tuple[str, str]:
    line = {"custom_id": "1", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "secret"}}
    uploaded = client.post(
        "/v1/files", files={"file": ("in.jsonl", json.dumps(line) + "\n")}, data={"purpose": "batch"}, headers=headers
    )
    assert uploaded.status_code == 200, uploaded.text
    file_id = uploaded.json()["id"]
    body = {"input_file_id": file_id, "endpoint": "/v1/embeddings", "completion_window": "24h"}
    batch = client.post("/v1/batches", json=body, headers=headers)
    assert batch.status_code == 200, batch.text
    return file_id, batch.json()["id"]


def ids(answer) -> set[str]:
    assert answer.status_code == 200, answer.text
    return {item["id"] for item in answer.json()["data"]}


def test_another_keys_ids_answer_exactly_as_unknown_ones_and_change_nothing(keyed):
    file_a, batch_a = upload_and_run(keyed, as_("alice"))
    file_b, batch_b = upload_and_run(keyed, as_("bob"))
    assert ids(keyed.get("/v1/files", headers=as_("bob"))) == {file_b}
    assert ids(keyed.get("/v1/batches", headers=as_("bob"))) == {batch_b}
    unknown_file, unknown_batch = "file-" + "0" * 24, "batch_" + "0" * 24
    for method, path, unknown in [
        ("get", f"/v1/files/{file_a}", unknown_file),
        ("get", f"/v1/files/{file_a}/content", unknown_file),
        ("delete", f"/v1/files/{file_a}", unknown_file),
        ("get", f"/v1/batches/{batch_a}", unknown_batch),
        ("post", f"/v1/batches/{batch_a}/cancel", unknown_batch),
    ]:
        theirs = keyed.request(method, path, headers=as_("bob"))
        nobodys = keyed.request(method, path.replace(path.split("/")[3], unknown), headers=as_("bob"))
        assert theirs.status_code == nobodys.status_code == 404, (path, theirs.text)
        # The same body but for the id each names: nothing tells them apart.
        assert theirs.json() == json.loads(nobodys.text.replace(unknown, path.split("/")[3])), path
    # A batch from another key's file: the file is not found either.
    body = {"input_file_id": file_a, "endpoint": "/v1/embeddings", "completion_window": "24h"}
    assert keyed.post("/v1/batches", json=body, headers=as_("bob")).status_code == 404
    # Alice still has all of hers, untouched.
    assert keyed.get(f"/v1/batches/{batch_a}", headers=as_("alice")).json()["status"] == "in_progress"
    assert json.loads(keyed.get(f"/v1/files/{file_a}/content", headers=as_("alice")).text)["body"]["input"] == "secret"
    assert ids(keyed.get("/v1/files", headers=as_("alice"))) == {file_a}


def test_an_admin_key_finds_and_manages_every_keys(keyed):
    file_a, batch_a = upload_and_run(keyed, as_("alice"))
    file_b, batch_b = upload_and_run(keyed, as_("bob"))
    assert ids(keyed.get("/v1/files", headers=as_("admin"))) >= {file_a, file_b}
    assert ids(keyed.get("/v1/batches", headers=as_("admin"))) >= {batch_a, batch_b}
    cancelled = keyed.post(f"/v1/batches/{batch_b}/cancel", headers=as_("admin"))
    assert cancelled.json()["status"] in ("cancelling", "cancelled")
    assert keyed.delete(f"/v1/files/{file_a}", headers=as_("admin")).json()["deleted"] is True
    assert keyed.get(f"/v1/files/{file_a}", headers=as_("alice")).status_code == 404


def test_without_keys_everything_is_everyones(tmp_path):
    client, store = server(tmp_path, Settings())
    try:
        file_id, batch_id = upload_and_run(client, {})
        assert ids(client.get("/v1/files")) == {file_id} and ids(client.get("/v1/batches")) == {batch_id}
        assert store.file(file_id).owner is None  # nobody's: an admin key finds it once keys are set
    finally:
        store.close()


def test_what_a_key_creates_is_stored_under_its_keyed_hash_never_the_key(keyed, tmp_path):
    file_a, batch_a = upload_and_run(keyed, as_("alice"))
    raw = (tmp_path / "jobs.sqlite3").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("jobs.sqlite3-*"))
    assert KEYS["alice"].encode() not in raw
    owner = keyed.app.state.keyring.tenants[0].owner
    assert len(owner) == 64 and owner in raw.decode(errors="replace")
