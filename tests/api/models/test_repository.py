"""The gateway's side of the repository: the setting, the off-loop calls and their errors,
and a registry over an S3 repository (moto_server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from embedgate.api.cli.main import main as cli_main
from embedgate.api.endpoints.statuses import headers_of, status_of
from embedgate.api.errors import ModelNotFound, ModelNotLoaded, RepositoryUnavailable
from embedgate.api.models.registry import ModelRegistry
from embedgate.api.models.repository import off_loop, open_for
from embedgate.api.settings import Settings
from embedgate.contract.errors import RepositoryError
from embedgate.contract.repository import LocalRepository
from tests.contract.repository.staged import write_model
from tests.s3 import SECRET_ACCESS_KEY

SECRET_URL = "s3://AKIAEXAMPLE:url-secret-value@127.0.0.1:9000/bucket/models"


def closed_url(bucket: str) -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"s3://127.0.0.1:{sock.getsockname()[1]}/{bucket}/models"


def test_the_setting_takes_a_directory_or_a_url_and_refuses_credentials_without_echo(tmp_path):
    assert Settings(model_repository=tmp_path).model_repository == str(tmp_path)
    assert Settings(model_repository="s3://127.0.0.1:9000//b/m/").model_repository == "s3://127.0.0.1:9000/b/m"
    with pytest.raises(ValueError, match="must not carry credentials") as refused:
        Settings(model_repository=SECRET_URL)
    assert "url-secret-value" not in str(refused.value)


def test_serve_refuses_such_a_url_at_startup_with_a_clear_message(capsys):
    with pytest.raises(SystemExit) as exited:
        cli_main(["serve", "--model-repository", SECRET_URL])
    assert "invalid settings" in str(exited.value) and "must not carry credentials" in str(exited.value)
    assert "url-secret-value" not in str(exited.value) + capsys.readouterr().err


def test_the_cache_lives_in_the_work_dir_unless_set(tmp_path):
    assert Settings(triton_work_dir=tmp_path).repository_cache == tmp_path / "repository-cache"
    assert Settings(triton_work_dir=tmp_path, repository_cache_dir=tmp_path / "c").repository_cache == tmp_path / "c"
    assert isinstance(open_for(Settings(model_repository=tmp_path)), LocalRepository)


async def test_a_repository_failure_is_a_503_to_retry():
    def unreachable():
        raise RepositoryError("S3 repository s3://h:1/b: could not connect")

    with pytest.raises(RepositoryUnavailable) as failed:
        await off_loop(unreachable)
    assert (status_of(failed.value), failed.value.code) == (503, "repository_unavailable")
    assert headers_of(failed.value)["Retry-After"]


class NoNetwork:
    def __getattr__(self, name):
        raise AssertionError(f"the bucket was called ({name}) on the request path")


def test_a_request_for_a_model_not_loaded_never_calls_the_bucket(tmp_path):
    registry = ModelRegistry(Settings(model_repository="s3://127.0.0.1:9/b/m", triton_work_dir=tmp_path), backend=None)
    registry.repository._client = NoNetwork()
    with pytest.raises(ModelNotFound):
        registry.served("org/unknown")
    with pytest.raises(ModelNotFound):
        registry.served("ViT-B-32", "tag")
    # Seen in the bucket (listed, loaded or converted before): "in the repository, not loaded".
    registry._seen.update({"org--known", "ViT-B-32_tag_text_encoder", "ViT-B-32_tag_image_encoder"})
    with pytest.raises(ModelNotLoaded):
        registry.served("org/known")
    with pytest.raises(ModelNotLoaded):
        registry.served("ViT-B-32", "tag")


def test_where_first_requests_load_a_model_never_seen_in_the_bucket_is_the_loads_to_find(tmp_path):
    """The request path still never calls the bucket: a model this process has not seen there
    is one to load for the request (the load reads the bucket, and says 404 if it is not there),
    as another replica may have converted it."""
    settings = Settings(model_repository="s3://127.0.0.1:9/b/m", triton_work_dir=tmp_path, load_on_first_request=True)
    registry = ModelRegistry(settings, backend=None)
    registry.repository._client = NoNetwork()
    with pytest.raises(ModelNotLoaded) as missing:
        registry.served("org/unknown")
    assert missing.value.key == "org/unknown"
    with pytest.raises(ModelNotLoaded) as missing:
        registry.served("ViT-B-32", "tag")
    assert missing.value.key == "ViT-B-32:tag"


async def test_listing_and_manifest_over_s3(s3_bucket, tmp_path):
    registry = ModelRegistry(Settings(model_repository=s3_bucket.url, triton_work_dir=tmp_path), backend=None)
    for name in ("org--one", "two"):
        with registry.repository.stage(name) as stage:
            write_model(stage.path, name)
            stage.publish()
    assert [m.triton_name for m in await registry.on_disk()] == ["org--one", "two"]
    with pytest.raises(ModelNotLoaded):
        registry.served("org/one")  # listed, so known to be there

    registry._served["org/one"] = object()
    await registry.write_manifest()
    assert s3_bucket.keys(".embedgate-loaded.json") == [".embedgate-loaded.json"]
    assert await asyncio.to_thread(registry.manifest) == ["org/one"]


async def test_an_unreachable_bucket_fails_listing_with_503_and_never_startup(s3_bucket, tmp_path, caplog):
    registry = ModelRegistry(Settings(model_repository=closed_url(s3_bucket.name), triton_work_dir=tmp_path), backend=None)
    with pytest.raises(RepositoryUnavailable) as failed:
        await registry.on_disk()
    assert SECRET_ACCESS_KEY not in failed.value.message
    with caplog.at_level(logging.ERROR, logger="embedgate.registry"):
        assert await asyncio.to_thread(registry.manifest) == []  # restoring goes on without it
        registry._served["org/one"] = object()
        await registry.write_manifest()  # the load it follows stands
    assert [r.message for r in caplog.records if "manifest" in r.message]
    assert SECRET_ACCESS_KEY not in caplog.text
