"""The hub's failures as the conversion's own errors: read from the whole chain of what
huggingface_hub raised, each with words that name the repository and the file, never the
exception's text, and what to do."""

import httpx2
import pytest
from huggingface_hub import errors as hub

from embedgate.contract import errors
from embedgate.converters.hub import failures
from embedgate.converters.hub.failures import classified


def answered(status: int, error: type = hub.HfHubHTTPError) -> Exception:
    request = httpx2.Request("GET", "http://127.0.0.1:9/org/m/resolve/main/model.safetensors")
    return error(f"{status} Client Error: secret details", response=httpx2.Response(status, request=request))


def raised_from(cause: Exception, error: Exception) -> Exception:
    try:
        try:
            raise cause
        except Exception as inner:
            raise error from inner
    except Exception as outer:
        return outer


@pytest.fixture
def token(monkeypatch):
    def set_token(value):
        monkeypatch.setattr(failures, "has_token", lambda: value)

    set_token(False)
    return set_token


def test_a_model_or_revision_the_hub_does_not_have(token):
    missing = classified(answered(401, hub.RepositoryNotFoundError), "org/m", None)
    assert isinstance(missing, errors.ModelNotFoundError)
    assert str(missing) == ("the hub has no model 'org/m' (or it is private or gated and this server has no token: "
                            "set HF_TOKEN in the server's environment)")
    token(True)
    assert "the token in HF_TOKEN" in str(classified(answered(404, hub.RepositoryNotFoundError), "org/m", None))
    revision = classified(answered(404, hub.RevisionNotFoundError), "org/m", "v9")
    assert isinstance(revision, errors.ModelNotFoundError)
    assert str(revision) == "the hub has no revision 'v9' of model 'org/m'"


def test_a_gated_model_names_hf_token_with_a_token_or_without(token):
    without = classified(answered(401, hub.GatedRepoError), "org/m", None, "model.safetensors")
    assert isinstance(without, errors.HubAccessDenied) and "has no token: set HF_TOKEN" in str(without)
    token(True)
    refused = classified(answered(403, hub.GatedRepoError), "org/m", None, "model.safetensors")
    assert isinstance(refused, errors.HubAccessDenied) and "the token in HF_TOKEN" in str(refused)
    forbidden = classified(answered(403), "org/m", None, "model.safetensors")
    assert isinstance(forbidden, errors.HubAccessDenied) and "HTTP 403" in str(forbidden)


def test_a_timeout_anywhere_in_the_chain_is_the_hubs_timeout():
    behind = raised_from(httpx2.ReadTimeout("timed out"), hub.LocalEntryNotFoundError("cannot find it"))
    timeout = classified(behind, "org/m", "v1", "model.safetensors")
    assert isinstance(timeout, errors.HubTimeout)
    assert "'model.safetensors' of 'org/m' at revision 'v1'" in str(timeout) and "next load" in str(timeout)


@pytest.mark.parametrize("error", [
    answered(503), answered(500), answered(429),
    httpx2.RemoteProtocolError("peer closed connection"), httpx2.ConnectError("refused"),
    OSError("Consistency check failed: file should be of size 10 but has size 5"),
    hub.LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub"),
])
def test_a_hub_that_fails_or_cuts_the_connection_is_unavailable(error):
    failure = classified(error, "org/m", None, "tokenizer.json")
    assert isinstance(failure, errors.HubUnavailable), error
    assert "'tokenizer.json' of 'org/m'" in str(failure) and "secret" not in str(failure)


def test_offline_is_downloads_off_and_anything_else_is_not_the_hubs():
    offline = classified(hub.OfflineModeIsEnabled("offline"), "org/m", None)
    assert isinstance(offline, errors.HubDownloadsDisabled)
    assert classified(ValueError("a bug of ours"), "org/m", None) is None
    assert classified(PermissionError(13, "Permission denied"), "org/m", None) is None
