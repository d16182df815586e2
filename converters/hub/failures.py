"""The hub's failures in the conversion's own words (``contract/errors.py``), so the gateway
answers each with its status and never reads an exception's text: a model or revision the
hub does not have (404), a gated or private one the server's token cannot open (403, naming
HF_TOKEN), a hub that stopped sending (504) or could not be reached, cut the connection or
answered with a server error (502). The messages name the repository and the file, never a
path of this host, and say what to do.

huggingface_hub raises its own errors (``RepositoryNotFoundError``, ``GatedRepoError``,
``RevisionNotFoundError``, ``HfHubHTTPError`` with the hub's status) and lets httpx's through
(timeouts, a connection refused or cut), often as the cause of another (a failed metadata
call behind ``LocalEntryNotFoundError``): the whole chain is read, the most telling first.
"""

from __future__ import annotations

from collections.abc import Iterator

from embedgate.contract.errors import (
    ConversionError,
    HubAccessDenied,
    HubDownloadsDisabled,
    HubTimeout,
    HubUnavailable,
    ModelNotFoundError,
)

TOKEN_HINT = "HF_TOKEN in the server's environment"
RESUMES = "the files that arrived whole stay in the hub cache, and the next load downloads only the others"


def chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors behind it (its cause, or the one it was raised while handling)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def has_token() -> bool:
    try:
        from huggingface_hub import get_token

        return get_token() is not None
    except Exception:  # noqa: BLE001 - a token that cannot be read is no token
        return False


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def classified(
    error: BaseException, repo_id: str, revision: str | None, file: str | None = None
) -> ConversionError | None:
    """``error`` (raised while fetching ``file`` of ``repo_id`` at ``revision``; no file:
    the repository's info or listing) as the conversion's error; None where it is not the
    hub's doing."""
    import httpx2
    from huggingface_hub import errors as hub

    errors = list(chain(error))
    token = has_token()
    what = f"'{repo_id}'" + (f" at revision '{revision}'" if revision else "")
    of_file = f"'{file}' of {what}" if file else what

    def first(*types: type) -> BaseException | None:
        return next((e for e in errors if isinstance(e, types)), None)

    if first(hub.OfflineModeIsEnabled):
        return HubDownloadsDisabled(f"model {what} is not in the hub cache and this conversion may not reach the hub")
    if first(hub.GatedRepoError):
        if token:
            return HubAccessDenied(
                f"model {what} is gated on the hub and the token in {TOKEN_HINT} has no access to it: ask for "
                "access on the model's page with that token's account"
            )
        return HubAccessDenied(
            f"model {what} is gated on the hub and this server has no token: set {TOKEN_HINT} to a token of "
            "an account granted access"
        )
    if first(hub.RevisionNotFoundError):
        return ModelNotFoundError(f"the hub has no revision '{revision or 'main'}' of model '{repo_id}'")
    if first(hub.RepositoryNotFoundError):
        hint = (
            f"or it is private and the token in {TOKEN_HINT} has no access to it" if token
            else f"or it is private or gated and this server has no token: set {TOKEN_HINT}"
        )
        return ModelNotFoundError(f"the hub has no model '{repo_id}' ({hint})")
    if first(hub.RemoteEntryNotFoundError):
        return ModelNotFoundError(f"the hub has no file {of_file} any more (changed while downloading?)")
    refused = next((e for e in errors if _status(e) in (401, 403)), None)
    if refused is not None:
        return HubAccessDenied(f"the hub refused {of_file} (HTTP {_status(refused)}): check {TOKEN_HINT}")
    if first(httpx2.TimeoutException):
        return HubTimeout(
            f"the hub stopped answering while downloading {of_file} (after huggingface_hub's retries; "
            f"HF_HUB_DOWNLOAD_TIMEOUT sets how long it waits); {RESUMES}"
        )
    failed = next((e for e in errors if (_status(e) or 0) >= 500 or _status(e) == 429), None)
    if failed is not None:
        return HubUnavailable(f"the hub answered HTTP {_status(failed)} while downloading {of_file}; {RESUMES}")
    if first(httpx2.TransportError):
        return HubUnavailable(f"the connection to the hub failed while downloading {of_file}; {RESUMES}")
    if first(hub.LocalEntryNotFoundError, hub.HfHubHTTPError) or _cut_short(errors):
        return HubUnavailable(f"could not download {of_file} from the hub; {RESUMES}")
    return None


def _cut_short(errors: list[BaseException]) -> bool:
    # huggingface_hub's own check that a file arrived whole (an OSError with these words).
    return any(isinstance(e, OSError) and "Consistency check failed" in str(e) for e in errors)
