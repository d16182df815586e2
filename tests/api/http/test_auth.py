import re

import pytest

from embedgate.api.http.auth import Forbidden, KeyRing, Unauthorized, keyed_hash


def test_no_keys_means_open():
    ring = KeyRing([], [])
    ring.check(None, admin=False)
    ring.check(None, admin=True)


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic abc", "api-1", "bearer wrong"])
def test_api_keys_refuse_missing_or_wrong_credentials(header):
    with pytest.raises(Unauthorized):
        KeyRing(["api-1"], []).check(header, admin=False)


def test_any_listed_api_key_or_admin_key_passes():
    ring = KeyRing(["api-1", "api-2"], ["admin-1"])
    for key in ("api-1", "api-2", "admin-1"):
        ring.check(f"Bearer {key}", admin=False)
    ring.check("bearer   api-2  ", admin=False)


def test_admin_actions_need_an_admin_key_when_one_is_set():
    ring = KeyRing(["api-1"], ["admin-1"])
    ring.check("Bearer admin-1", admin=True)
    with pytest.raises(Forbidden):
        ring.check("Bearer api-1", admin=True)
    with pytest.raises(Unauthorized):
        ring.check("Bearer nope", admin=True)


def test_without_admin_keys_an_api_key_may_manage_models():
    KeyRing(["api-1"], []).check("Bearer api-1", admin=True)


def test_admin_keys_alone_close_inference_too():
    # Keys mean the port is reachable by others: with admin keys and no API keys, nothing
    # behind a key is left open, and an admin key is the key for everything.
    ring = KeyRing([], ["admin-1"])
    for admin in (True, False):
        with pytest.raises(Unauthorized):
            ring.check(None, admin=admin)
        with pytest.raises(Unauthorized):
            ring.check("Bearer api-1", admin=admin)
        ring.check("Bearer admin-1", admin=admin)


def test_a_matching_key_is_its_tenant_by_keyed_hash_and_label():
    ring = KeyRing(["api-1", "api-2"], ["admin-1"], names={"api-2": "team-b"})
    one, two, admin = (ring.check(f"Bearer {key}", admin=False) for key in ("api-1", "api-2", "admin-1"))
    assert (one.admin, two.admin, admin.admin) == (False, False, True)
    assert len({one.owner, two.owner, admin.owner}) == 3
    assert all(len(t.owner) == 64 and "api" not in t.owner for t in (one, two, admin))
    assert two.label == "team-b" and re.fullmatch(r"key-[0-9a-f]{8}", one.label)
    assert one.label[4:] not in one.owner  # the label is not a piece of the owner hash
    assert KeyRing(["api-1"], []).check("Bearer api-1", admin=False) == one  # the same every start


def test_the_secret_keys_the_hash():
    plain = KeyRing(["api-1"], []).tenants[0]
    secret = KeyRing(["api-1"], [], secret="s3cret").tenants[0]
    assert plain.owner != secret.owner and plain.label != secret.label
    assert secret.owner == keyed_hash("s3cret", "owner", "api-1")


def test_an_admin_key_that_is_also_an_api_key_is_an_admin():
    assert KeyRing(["both"], ["both"]).check("Bearer both", admin=False).admin


@pytest.mark.parametrize("without_key", [False, True])
def test_prometheus_may_answer_without_a_key_alone(without_key):
    from starlette.testclient import TestClient

    from embedgate.api.http.app import create_app
    from embedgate.api.settings import Settings

    app = TestClient(create_app(Settings(api_keys=["api-1"], prometheus_without_key=without_key)))
    # No gateway started behind the app: past the key check the answer is a 503.
    assert app.get("/metrics/prometheus").status_code == (503 if without_key else 401)
    assert app.get("/metrics").status_code == 401
    assert app.get("/loaded_models").status_code == 401
