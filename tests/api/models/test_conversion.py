"""What a client hears when a conversion fails: each of the converter's exit codes (the
contract's errors) as the gateway's error, and its status."""

from __future__ import annotations

import pytest

from embedgate.api import errors
from embedgate.api.endpoints.statuses import status_of
from embedgate.api.models.conversion import FAILURES
from embedgate.contract import errors as contract


@pytest.mark.parametrize(
    "failure, error, status",
    [
        (contract.ModelNotFoundError, errors.ModelNotFound, 404),
        (contract.ParityError, errors.ConversionFailed, 422),
        (contract.UnsupportedModelError, errors.UnsupportedModel, 422),
        # Code of the model's own, which the load did not allow to run: not allowed, rather than unservable.
        (contract.RemoteCodeRefused, errors.TrustRemoteCodeRequired, 403),
        # The hub's: downloads off and a gated model refused (the server's settings), a hub that
        # timed out, or failed (a gateway's upstream).
        (contract.HubDownloadsDisabled, errors.HubDownloadDisabled, 403),
        (contract.HubAccessDenied, errors.HubAccessDenied, 403),
        (contract.HubTimeout, errors.HubTimeout, 504),
        (contract.HubUnavailable, errors.HubUnavailable, 502),
    ],
)
def test_each_exit_code_is_its_error_and_status(failure, error, status):
    assert FAILURES[failure.exit_code] is error
    assert status_of(error("x")) == status
