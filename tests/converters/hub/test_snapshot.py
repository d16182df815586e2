"""A hub repository's snapshot, from the fake hub on 127.0.0.1 (``tests/hub_server.py``) into
a hub cache of the test's own, in this process: downloaded file by file with its progress,
only the files the libraries load; taken from the cache without a request where it is whole
there; at a branch, a tag or a commit; refused as the conversion's own errors."""

from __future__ import annotations

import pytest

from embedgate.contract import errors
from embedgate.contract.sources import hub_snapshot, made_from
from embedgate.converters.hub.snapshot import fetch
from tests.hub_server import FakeHub

FILES = {
    "config.json": b'{"model_type": "bert"}',
    "model.safetensors": bytes(range(256)) * 64,
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
    # Never downloaded: the safetensors beside it, a format nothing loads, a hidden file.
    "pytorch_model.bin": b"pickled weights",
    "onnx/model.onnx": b"an onnx graph",
    ".gitattributes": b"*.bin filter=lfs",
}
NEEDED = ["1_Pooling/config.json", "config.json", "model.safetensors"]


def repository(root, files: dict[str, bytes]):
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


@pytest.fixture
def hub(tmp_path):
    server = FakeHub()
    main = repository(tmp_path / "main", FILES)
    v1 = repository(tmp_path / "v1", {**FILES, "config.json": b'{"model_type": "bert", "v": 1}'})
    server.commits = {"org/m": server.add("org/m", {"main": main, "v1": v1}),
                      "org/gated": server.add("org/gated", {"main": main}, gated=True)}
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def online(hub_online):
    return hub_online


def download(hub, repo_id="org/m", revision=None, allow_network=True, told=None):
    report = (lambda message, data=None: told.append((message, data))) if told is not None else (lambda *_: None)
    return fetch(repo_id, revision, allow_network=allow_network, report=report, endpoint=hub.url)


def files_in(path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_snapshot_is_downloaded_file_by_file_with_its_progress(hub):
    told = []
    snapshot = download(hub, told=told)
    assert snapshot.commit == hub.commits["org/m"]["main"]
    assert files_in(snapshot.path) == {name: FILES[name] for name in NEEDED}
    fetched = {seen.path.rsplit("/", 1)[-1] for seen in hub.seen(method="GET") if "/resolve/" in seen.path}
    assert fetched == {"config.json"}  # the others come from the CDN, the weights' way, or never
    assert not [seen for seen in hub.seen() if "pytorch_model.bin" in seen.path or "onnx" in seen.path]
    numbers = [data["download"] for _, data in told if data]
    assert numbers[0]["files_done"] == 0 and numbers[-1]["files_done"] == numbers[-1]["files_total"] == 3
    assert numbers[-1]["bytes_done"] == numbers[-1]["bytes_total"] == sum(len(FILES[name]) for name in NEEDED)
    # The gateway finds the same snapshot in the cache, by the name alone.
    source = made_from("sentence_transformers", "org/m")
    assert (source.type, source.revision) == ("hub", snapshot.commit) and source.fingerprint
    assert snapshot.described() == f"hub:org/m (revision {snapshot.commit})"


def test_a_whole_snapshot_in_the_cache_asks_nothing_of_the_hub(hub):
    first = download(hub)
    since = len(hub.requests)
    told = []
    assert download(hub, told=told) == first
    assert download(hub, allow_network=False) == first
    assert hub.seen(since) == [] and "nothing to download" in told[0][0]
    # A file gone from it: the snapshot is not whole, and only that file is asked for again
    # (its bytes are still in the cache's blobs: the hub's answer to HEAD finds them).
    (first.path / "config.json").unlink()
    assert files_in(download(hub).path) == files_in(first.path) and (first.path / "config.json").is_file()
    asked = {(seen.method, seen.path.rsplit("/", 1)[-1]) for seen in hub.seen(since) if "/resolve/" in seen.path}
    assert asked == {("HEAD", "config.json")}


def test_a_revision_by_branch_tag_or_commit(hub):
    v1 = download(hub, revision="v1")
    assert v1.commit == hub.commits["org/m"]["v1"] != hub.commits["org/m"]["main"]
    assert files_in(v1.path)["config.json"] == b'{"model_type": "bert", "v": 1}'
    assert hub_snapshot("org/m", "v1") == (v1.path, v1.commit)
    assert hub_snapshot("org/m") is None  # main was never downloaded
    since = len(hub.requests)
    assert download(hub, revision=v1.commit) == v1 and hub.seen(since) == []


def test_downloads_off_and_nothing_in_the_cache(hub):
    with pytest.raises(errors.HubDownloadsDisabled, match="set EMBEDGATE_ALLOW_HUB_DOWNLOAD=true"):
        download(hub, allow_network=False)
    assert hub.requests == []


def test_the_hubs_refusals_are_the_conversions_errors(hub, monkeypatch):
    with pytest.raises(errors.ModelNotFoundError, match="the hub has no model 'org/nowhere'"):
        download(hub, "org/nowhere")
    with pytest.raises(errors.ModelNotFoundError, match="no revision 'v9' of model 'org/m'"):
        download(hub, revision="v9")
    with pytest.raises(errors.HubAccessDenied, match="gated on the hub and this server has no token"):
        download(hub, "org/gated")
    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    with pytest.raises(errors.HubAccessDenied, match="the token in HF_TOKEN in the server's environment has no access"):
        download(hub, "org/gated")
    hub.grant("org/gated", "hf_granted")
    assert files_in(download(hub, "org/gated").path) == {name: FILES[name] for name in NEEDED}


def test_a_cut_download_keeps_the_whole_files_and_the_next_fetches_the_rest(hub):
    hub.fault("org/m", "model.safetensors", "cut", "unavailable")
    with pytest.raises(errors.HubUnavailable, match="HTTP 503 while downloading 'model.safetensors' of 'org/m'"):
        download(hub)
    commit = hub.commits["org/m"]["main"]
    partial = hub_snapshot("org/m", commit)
    assert partial is not None and sorted(files_in(partial[0])) == ["1_Pooling/config.json", "config.json"]
    assert hub_snapshot("org/m") is None  # no ref to it until it is whole
    hub.mend("org/m", "model.safetensors")
    since = len(hub.requests)
    assert files_in(download(hub).path) == {name: FILES[name] for name in NEEDED}
    assert [seen.server for seen in hub.seen(since, method="GET") if seen.server == "cdn"] == ["cdn"]
    assert not [seen for seen in hub.seen(since, method="GET") if "/resolve/" in seen.path]
