"""boto3 is the s3 extra: a local repository never needs it, an S3 one says what to install."""

from __future__ import annotations

import sys

import pytest

from embedgate.contract.repository import open_repository
from embedgate.contract.repository.location import parse_s3
from embedgate.contract.repository.s3_client import S3SupportMissing, check_supported, make_client

URL = "s3://127.0.0.1:9000/bucket/models"


@pytest.fixture
def without_boto3(monkeypatch):
    # None in sys.modules: an import of it raises ImportError, as when it is not installed.
    for name in ("boto3", "botocore", "botocore.config", "botocore.exceptions"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "embedgate.contract.repository.s3", raising=False)


def test_a_local_repository_needs_no_boto3(without_boto3, tmp_path):
    assert check_supported(str(tmp_path)) == str(tmp_path)
    repository = open_repository(tmp_path / "models")
    repository.create()
    assert repository.names() == []
    assert not repository.exists("anything")


def test_an_s3_location_without_boto3_says_what_to_install(without_boto3, tmp_path):
    with pytest.raises(ValueError, match=r'pip install "embedgate\[s3\]"'):
        check_supported(URL)
    with pytest.raises(S3SupportMissing, match=r'embedgate\[s3\]'):
        open_repository(URL, tmp_path)
    with pytest.raises(S3SupportMissing, match=r'embedgate\[s3\]'):
        make_client(parse_s3(URL))


def test_with_boto3_an_s3_location_is_accepted():
    assert check_supported(URL) == URL
    assert make_client(parse_s3(URL)).meta.service_model.service_name == "s3"
