"""Repository locations: a directory, or an S3 URL read exactly as Triton reads it."""

from pathlib import Path

import pytest

from embedgate.contract.repository import InvalidLocation, is_s3, normalize, parse_s3, triton_location


def test_an_s3_compatible_service_is_host_port_then_bucket_and_path():
    location = parse_s3("s3://127.0.0.1:9000/models-bucket/team/repo")
    assert (location.endpoint_url, location.bucket, location.prefix) == ("http://127.0.0.1:9000", "models-bucket", "team/repo")
    assert location.url == "s3://127.0.0.1:9000/models-bucket/team/repo"
    assert location.key("minilm", "1/model.onnx") == "team/repo/minilm/1/model.onnx"


def test_https_is_asked_for_in_the_url_and_plain_http_is_the_default():
    assert parse_s3("s3://https://minio.example:443/b/p").endpoint_url == "https://minio.example:443"
    explicit_http = parse_s3("s3://http://minio.example:9000/b/p")
    assert explicit_http.endpoint_url == "http://minio.example:9000"
    assert explicit_http.url == "s3://minio.example:9000/b/p"  # Triton's default, written short


def test_without_host_port_it_is_amazon_s3():
    location = parse_s3("s3://my.bucket/models")
    assert (location.endpoint_url, location.bucket, location.prefix) == (None, "my.bucket", "models")
    assert location.url == "s3://my.bucket/models"


def test_extra_slashes_are_cleaned_as_triton_cleans_them():
    assert normalize("s3://127.0.0.1:9000//bucket//a/b/") == "s3://127.0.0.1:9000/bucket/a/b"
    root = parse_s3("s3://127.0.0.1:9000/bucket")
    assert root.prefix == "" and root.key("minilm") == "minilm" and root.key(".embedgate-loaded.json") == ".embedgate-loaded.json"


@pytest.mark.parametrize(
    "url",
    [
        "s3://AKIAEXAMPLE:very-secret-value@127.0.0.1:9000/bucket/models",
        "s3://AKIAEXAMPLE:very-secret-value@bucket/models",
        "s3://https://AKIAEXAMPLE:very-secret-value@minio:443/bucket",
        "s3://very-secret-value@bucket",
    ],
)
def test_credentials_in_the_url_are_refused_without_repeating_them(url):
    with pytest.raises(InvalidLocation, match="must not carry credentials") as refused:
        normalize(url)
    assert "very-secret-value" not in str(refused.value)


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("gs://bucket/models", "no other scheme"),
        ("https://minio:9000/bucket", "no other scheme"),
        ("file:///srv/models", "no other scheme"),
        ("s3://", "names no bucket"),
        ("s3://127.0.0.1:9000", "no bucket after host:port"),
        ("s3://127.0.0.1:99999/bucket", "host:port"),
        ("s3://127.0.0.1:port/bucket", "host:port"),
        ("s3://https://minio.example/bucket", "needs a port"),
        ("s3://Upper-Case/models", "bucket name"),
        ("s3://bucket_underscore/models", "bucket name"),
        ("s3://127.0.0.1:9000/bucket/with space", "path may hold only"),
        ("s3://127.0.0.1:9000/bucket/models?versionId=1", "query"),
        ("", "a directory or an s3:// URL"),
    ],
)
def test_what_triton_would_misread_is_refused(location, why):
    with pytest.raises(InvalidLocation, match=why):
        normalize(location)


def test_a_local_directory_is_kept_as_given_and_resolved_for_triton(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert normalize(Path("model_repository")) == "model_repository"
    assert normalize("model_repository") == "model_repository"
    assert triton_location("model_repository") == str(tmp_path.resolve() / "model_repository")
    assert not is_s3("model_repository") and is_s3("s3://bucket/x")


def test_each_repository_url_has_its_own_cache_directory():
    one, two = parse_s3("s3://127.0.0.1:9000/b/one"), parse_s3("s3://127.0.0.1:9000/b/two")
    assert one.cache_name() == parse_s3("s3://127.0.0.1:9000//b/one/").cache_name()
    assert one.cache_name() != two.cache_name()
