import pytest

from embedgate.api.http.auth import Forbidden, KeyRing, Unauthorized


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
