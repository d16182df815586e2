"""A model repository in S3, against a real S3-compatible server (moto_server on 127.0.0.1)."""

from __future__ import annotations

import pytest

from embedgate.contract.errors import RepositoryError, TargetExistsError
from embedgate.contract.repository import open_repository
from embedgate.contract.repository.publish import STAGING_DIR
from tests.s3 import SECRET_ACCESS_KEY

from .staged import metadata, write_model

MODEL_KEYS = [
    "minilm/1/model.onnx", "minilm/1/model.py", "minilm/config.pbtxt",
    "minilm/metadata.json", "minilm/tokenizer/tokenizer.json",
]


@pytest.fixture
def repository(s3_bucket, tmp_path):
    return open_repository(s3_bucket.url, tmp_path / "cache")


def publish(repository, name="minilm", **files):
    with repository.stage(name) as stage:
        write_model(stage.path, name, **files)
        stage.publish()


class UploadSpy:
    """Records the keys the repository writes (every upload ends in put_object), and can
    interrupt the upload that would come after ``fail_at`` of them, in the caller's thread
    as a signal handler's exception would be."""

    def __init__(self, client, fail_at: int | None = None, error: BaseException | None = None):
        self.keys: list[str] = []
        self._fail_at, self._error = fail_at, error
        self._upload_file, self._put_object = client.upload_file, client.put_object

    def upload_file(self, *args, **kwargs):
        if self._fail_at is not None and len(self.keys) >= self._fail_at:
            raise self._error
        return self._upload_file(*args, **kwargs)

    def put_object(self, **kwargs):
        self.keys.append(kwargs["Key"])
        return self._put_object(**kwargs)


def spy_on(repository, monkeypatch, **failure) -> UploadSpy:
    spy = UploadSpy(repository._client, **failure)
    monkeypatch.setattr(repository._client, "upload_file", spy.upload_file)
    monkeypatch.setattr(repository._client, "put_object", spy.put_object)
    return spy


def test_published_model_is_in_the_bucket_and_read_back(repository, s3_bucket):
    assert repository.remote and repository.location == s3_bucket.url
    assert repository.names() == [] and not repository.exists("minilm")
    publish(repository)
    assert s3_bucket.keys() == MODEL_KEYS
    assert repository.exists("minilm") and repository.names() == ["minilm"]
    assert repository.metadata("minilm") == metadata("minilm")
    assert repository.metadata("absent") is None


def test_config_goes_last_and_metadata_just_before_it(repository, monkeypatch):
    spy = spy_on(repository, monkeypatch)
    publish(repository)
    assert spy.keys[-2:] == ["models/minilm/metadata.json", "models/minilm/config.pbtxt"]
    assert sorted(spy.keys) == [f"models/{key}" for key in MODEL_KEYS]


@pytest.mark.parametrize("interruption", [RuntimeError("connection reset"), KeyboardInterrupt()])
def test_an_interrupted_upload_leaves_nothing_and_never_a_config(repository, s3_bucket, monkeypatch, interruption):
    spy = spy_on(repository, monkeypatch, fail_at=3, error=interruption)
    with pytest.raises(type(interruption)):
        publish(repository)
    assert len(spy.keys) == 3 and not any(key.endswith("config.pbtxt") for key in spy.keys)
    assert s3_bucket.keys() == []
    assert not (repository.cache_dir / STAGING_DIR).exists()


def test_a_failure_before_publishing_uploads_nothing(repository, s3_bucket):
    with pytest.raises(RuntimeError, match="parity"):
        with repository.stage("minilm") as stage:
            write_model(stage.path, "minilm")
            raise RuntimeError("parity check failed")
    assert s3_bucket.keys() == []


def test_a_name_taken_is_refused_before_any_work(repository):
    publish(repository)
    with pytest.raises(TargetExistsError, match="already exists"):
        with repository.stage("minilm"):
            pytest.fail("the block must not run")


def test_of_two_conversions_publishing_one_name_the_second_loses_without_harm(repository, s3_bucket, tmp_path, monkeypatch):
    publish(repository)
    # A second converter that checked before the first one's upload began.
    late = open_repository(s3_bucket.url, tmp_path / "other-cache")
    monkeypatch.setattr(late, "exists", lambda name: False)
    with pytest.raises(TargetExistsError):
        publish(late, dim=16)
    assert s3_bucket.keys() == MODEL_KEYS
    assert repository.metadata("minilm").embedding_dim in (8, 16)  # either's: identical conversions
    assert s3_bucket.client().get_object(Bucket=s3_bucket.name, Key="models/minilm/config.pbtxt")["Body"].read()


def test_replace_leaves_none_of_the_old_files(repository, s3_bucket):
    with repository.stage("minilm") as stage:
        write_model(stage.path, "minilm")
        (stage.path / "1" / "stale.bin").write_bytes(b"old")
        stage.publish()
    with repository.stage("minilm", replace=True) as stage:
        write_model(stage.path, "minilm", dim=16)
        stage.publish()
    assert s3_bucket.keys() == MODEL_KEYS
    assert repository.metadata("minilm").embedding_dim == 16


def test_fetch_brings_metadata_and_tokenizer_never_the_weights(repository):
    publish(repository)
    local = repository.fetch("minilm")
    assert local.parent == repository.cache_dir / "minilm"
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()) == [
        "metadata.json", "tokenizer/tokenizer.json",
    ]
    assert repository.fetch("minilm") == local  # the same conversion: the copy it has


def test_a_model_converted_anew_is_fetched_anew_and_the_old_copy_goes(repository, s3_bucket, tmp_path):
    publish(repository)
    old = repository.fetch("minilm")
    # Another gateway deleted and converted it again: new metadata, new tokenizer.
    other = open_repository(s3_bucket.url, tmp_path / "other-cache")
    other.delete("minilm")
    publish(other, tokenizer='{"v": 2}', dim=16)
    new = repository.fetch("minilm")
    assert new != old and not old.exists()
    assert (new / "tokenizer" / "tokenizer.json").read_text() == '{"v": 2}'
    assert list((repository.cache_dir / "minilm").iterdir()) == [new]


def test_gateways_sharing_a_cache_share_a_copy(repository, s3_bucket):
    publish(repository)
    again = open_repository(s3_bucket.url, repository.cache_dir.parent)
    assert again.fetch("minilm") == repository.fetch("minilm")


def test_fetch_into_a_directory_of_ones_own_brings_every_file(repository, tmp_path):
    publish(repository)
    into = tmp_path / "bench" / "minilm"
    assert repository.fetch("minilm", into=into) == into
    assert sorted(p.relative_to(into).as_posix() for p in into.rglob("*") if p.is_file()) == [
        key.removeprefix("minilm/") for key in MODEL_KEYS
    ]
    for call in (lambda: repository.fetch("absent"), lambda: repository.fetch("absent", into=tmp_path / "x")):
        with pytest.raises(RepositoryError, match="not in the repository"):
            call()


def test_delete_removes_every_object_config_first_and_the_cached_copy(repository, s3_bucket, monkeypatch):
    publish(repository)
    repository.fetch("minilm")
    deleted: list[list[str]] = []
    delete_objects = repository._client.delete_objects

    def record(**kwargs):
        deleted.append([item["Key"] for item in kwargs["Delete"]["Objects"]])
        return delete_objects(**kwargs)

    monkeypatch.setattr(repository._client, "delete_objects", record)
    repository.delete("minilm")
    assert deleted[0] == ["models/minilm/config.pbtxt"]
    assert s3_bucket.keys() == [] and not (repository.cache_dir / "minilm").exists()
    repository.delete("minilm")  # nothing there: no error


def test_remove_partial_takes_an_abandoned_upload_but_never_a_published_model(repository, s3_bucket, tmp_path):
    publish(repository, name="published")
    client = s3_bucket.client()
    for key in ("models/abandoned/1/model.onnx", "models/abandoned/metadata.json"):
        client.put_object(Bucket=s3_bucket.name, Key=key, Body=b"x")
    leftover = repository.cache_dir / STAGING_DIR / "abandoned-0123456789ab"
    leftover.mkdir(parents=True)
    repository.remove_partial("abandoned")
    repository.remove_partial("published")
    assert not leftover.exists()
    assert s3_bucket.keys() == [key.replace("minilm", "published") for key in MODEL_KEYS]


def test_manifest_is_an_object_beside_the_models_and_not_a_model(repository, s3_bucket):
    assert repository.read_manifest() == []
    repository.write_manifest(["org/model", "ViT-B-32:tag"])
    assert repository.read_manifest() == ["org/model", "ViT-B-32:tag"]
    assert s3_bucket.keys() == [".embedgate-loaded.json"]
    assert repository.names() == []


def test_create_makes_an_empty_prefix_a_repository_with_no_models(repository, s3_bucket):
    repository.create()
    repository.create()
    assert s3_bucket.keys() == [""]  # the folder marker "models/", once
    assert repository.names() == []
    publish(repository)
    assert repository.names() == ["minilm"]


def test_a_repository_at_the_bucket_root(s3_bucket, tmp_path):
    repository = open_repository(s3_bucket.url.rsplit("/", 1)[0], tmp_path / "cache")
    publish(repository)
    repository.write_manifest(["minilm"])
    assert repository.names() == ["minilm"] and repository.read_manifest() == ["minilm"]


def test_an_unreachable_service_is_a_repository_error_naming_it_and_no_secret(moto_server, s3_bucket, tmp_path):
    closed = f"s3://127.0.0.1:{_closed_port()}/{s3_bucket.name}/models"
    repository = open_repository(closed, tmp_path / "cache")
    for call in (lambda: repository.exists("minilm"), repository.names, lambda: repository.metadata("minilm")):
        with pytest.raises(RepositoryError) as failed:
            call()
        assert closed in str(failed.value) and SECRET_ACCESS_KEY not in str(failed.value)


def test_a_missing_bucket_is_a_repository_error(s3_bucket, tmp_path):
    repository = open_repository(s3_bucket.url.replace(s3_bucket.name, "no-such-bucket"), tmp_path / "cache")
    with pytest.raises(RepositoryError, match="NoSuchBucket"):
        repository.names()


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _publish_static(repository, name="static"):
    """A static embedding model as the converter stages one: no config.pbtxt, no graph,
    its vectors beside its tokenizer, metadata.json uploaded last."""
    from embedgate.contract.spec import ParityResult, RouteInfo

    parity = ParityResult(passed=True, threshold=0.9999, min_cosine=1.0, sentences=1)
    route = RouteInfo(name="", tasks=["default", "query", "document"], version=None, max_seq_length=16,
                      add_special_tokens=False, normalized=True, parity=parity)
    with repository.stage(name) as stage:
        (stage.path / "tokenizer").mkdir()
        (stage.path / "tokenizer" / "tokenizer.json").write_text('{"v": 1}')
        (stage.path / "weights.npy").write_bytes(b"vectors " * 100)
        (stage.path / "metadata.json").write_text(metadata(name).model_copy(update={"routes": [route]}).model_dump_json())
        stage.publish()


def test_a_static_models_vectors_are_fetched_and_it_is_never_taken_for_an_abandoned_upload(
    repository, s3_bucket, tmp_path, monkeypatch
):
    spy = spy_on(repository, monkeypatch)
    _publish_static(repository)
    # Its metadata.json completes it: written last, and only where absent.
    assert spy.keys[-1] == "models/static/metadata.json"
    late = open_repository(s3_bucket.url, tmp_path / "other-cache")
    monkeypatch.setattr(late, "exists", lambda name: False)
    with pytest.raises(TargetExistsError):
        _publish_static(late)
    local = repository.fetch("static")
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()) == [
        "metadata.json", "tokenizer/tokenizer.json", "weights.npy",
    ]
    repository.remove_partial("static")  # a failed conversion of the same name
    assert s3_bucket.keys() == ["static/metadata.json", "static/tokenizer/tokenizer.json", "static/weights.npy"]
