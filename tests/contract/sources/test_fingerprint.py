"""The fingerprint of a model's files: the same files give the same one wherever they are;
an edit to a config, the tokenizer or the weights gives another; a touch changes nothing for
a small file and, by decision, changes the weights' (see contract/sources/fingerprint.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from embedgate.contract.sources import fingerprint
from embedgate.contract.sources.fingerprint import FULL_HASH_MAX_BYTES, SAMPLE_BYTES

LARGE = FULL_HASH_MAX_BYTES + 8 * SAMPLE_BYTES


def model_dir(root: Path, weights: bytes = b"weights " * 1000) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"hidden_size": 32}')
    (root / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    (root / "model.safetensors").write_bytes(weights)
    return root


def large_weights(path: Path) -> Path:
    """Weights past the full-hash size: a sparse file, with a header and a tail written."""
    with open(path, "wb") as file:
        file.truncate(LARGE)
        file.write(b"header")
        file.seek(LARGE - 4)
        file.write(b"tail")
    return path


def rewrite_at(path: Path, offset: int, data: bytes, *, keep_time: bool) -> None:
    before = path.stat()
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)
    if keep_time:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def touch_later(path: Path) -> None:
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))


def test_the_same_files_give_the_same_fingerprint_wherever_they_are(tmp_path):
    first = model_dir(tmp_path / "a")
    copy = tmp_path / "b"
    shutil.copytree(first, copy)
    assert fingerprint(first) == fingerprint(first) == fingerprint(copy)
    assert fingerprint(first).startswith("sha256:") and len(fingerprint(first)) == 7 + 64


@pytest.mark.parametrize(
    "changed, content",
    [
        ("config.json", '{"hidden_size": 64}'),
        ("1_Pooling/config.json", '{"pooling_mode_weightedmean_tokens": true}'),
        ("tokenizer.json", '{"model": {"vocab": {"b": 0}}}'),
        ("model.safetensors", "weights " * 999 + "retrain "),
    ],
)
def test_an_edit_to_a_config_the_tokenizer_or_the_weights_changes_it(tmp_path, changed, content):
    model = model_dir(tmp_path / "m")
    before = fingerprint(model)
    (model / changed).write_text(content)
    assert fingerprint(model) != before


def test_a_file_added_removed_or_renamed_changes_it(tmp_path):
    model = model_dir(tmp_path / "m")
    before = fingerprint(model)
    (model / "2_Normalize").mkdir()
    (model / "2_Normalize" / "config.json").write_text("{}")
    assert fingerprint(model) != before
    shutil.rmtree(model / "2_Normalize")
    assert fingerprint(model) == before
    (model / "tokenizer.json").rename(model / "tokenizer2.json")
    assert fingerprint(model) != before


def test_touching_a_small_file_changes_nothing(tmp_path):
    model = model_dir(tmp_path / "m")
    before = fingerprint(model)
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        touch_later(model / name)
    assert fingerprint(model) == before


def test_large_weights_count_by_size_time_and_their_first_and_last_mib(tmp_path):
    model = model_dir(tmp_path / "m")
    weights = large_weights(model / "model.safetensors")
    before = fingerprint(model)
    # Touched (or copied without its time): another fingerprint, so a conversion again,
    # never an old model served for a retrained one whose sampled bytes did not change.
    touch_later(weights)
    touched = fingerprint(model)
    assert touched != before
    # Rewritten in its first or last MiB, even with its time put back.
    for offset in (100, LARGE - 100):
        current = fingerprint(model)
        rewrite_at(weights, offset, b"retrained", keep_time=True)
        assert fingerprint(model) != current
    # Grown by a byte.
    current = fingerprint(model)
    with open(weights, "ab") as file:
        file.write(b"x")
    assert fingerprint(model) != current


def test_a_checkpoint_file_is_fingerprinted_alone(tmp_path):
    checkpoint = tmp_path / "open_clip.pt"
    checkpoint.write_bytes(b"state dict")
    before = fingerprint(checkpoint)
    (tmp_path / "other.pt").write_bytes(b"beside it")
    assert fingerprint(checkpoint) == before
    checkpoint.write_bytes(b"another state dict")
    assert fingerprint(checkpoint) != before


def test_hidden_entries_model_cards_and_broken_links_are_no_part_of_a_model(tmp_path):
    model = model_dir(tmp_path / "m")
    before = fingerprint(model)
    (model / ".git").mkdir()
    (model / ".git" / "HEAD").write_text("ref: refs/heads/main")
    (model / ".cache").mkdir()
    (model / ".cache" / "download.lock").write_text("")
    (model / "__pycache__").mkdir()
    (model / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (model / "README.md").write_text("# a model card, trained on ...")
    (model / "missing.bin").symlink_to(tmp_path / "nowhere")
    assert fingerprint(model) == before


def test_a_linked_file_counts_as_what_it_points_to(tmp_path):
    """A hub snapshot's files are links to its blobs."""
    model = model_dir(tmp_path / "m")
    linked = tmp_path / "linked"
    linked.mkdir()
    for file in model.rglob("*"):
        target = linked / file.relative_to(model)
        if file.is_dir():
            target.mkdir()
        else:
            target.symlink_to(file)
    assert fingerprint(linked) == fingerprint(model)
