"""The verdict on a load's source against the one the repository's copy records: the same,
changed (convert again, or refuse), or unknown (served as before)."""

from __future__ import annotations

import pytest

from embedgate.api.errors import SourceChanged
from embedgate.api.http.errors import status_of
from embedgate.api.models.refs import ModelRef
from embedgate.api.models.source_change import SourceVerdict, compare, refusal
from embedgate.contract.sources import ModelSource

SAME, CHANGED, UNKNOWN = SourceVerdict.SAME, SourceVerdict.CHANGED, SourceVerdict.UNKNOWN


def directory(location: str, fingerprint: str | None = "sha256:aa") -> ModelSource:
    return ModelSource(type="directory", location=location, fingerprint=fingerprint)


def hub(revision: str | None, fingerprint: str | None) -> ModelSource:
    return ModelSource(type="hub", location="org/m", revision=revision, fingerprint=fingerprint)


@pytest.mark.parametrize(
    "recorded, wanted, verdict",
    [
        # Converted before sources were recorded: nothing to compare with.
        (None, directory("/a"), UNKNOWN),
        # The same directory, the same files; the same one changed; another directory.
        (directory("/a"), directory("/a"), SAME),
        (directory("/a"), directory("/a", "sha256:bb"), CHANGED),
        (directory("/a"), directory("/b"), CHANGED),
        (directory("/a"), directory("/b", None), CHANGED),
        # The same directory, unreadable now (or then): cannot be compared.
        (directory("/a"), directory("/a", None), UNKNOWN),
        (directory("/a", None), directory("/a"), UNKNOWN),
        # A load by name alone of a model converted from a directory: the repository's copy.
        (directory("/a"), hub(None, None), SAME),
        (directory("/a"), ModelSource(type="package", location="/site/m", fingerprint="sha256:cc"), SAME),
        # A hub name: its cached snapshot's files decide, not the commit alone.
        (hub("1" * 40, "sha256:aa"), hub("1" * 40, "sha256:aa"), SAME),
        (hub("1" * 40, "sha256:aa"), hub("2" * 40, "sha256:bb"), CHANGED),
        (hub("1" * 40, "sha256:aa"), hub("2" * 40, "sha256:aa"), SAME),
        # Not in the cache any more: served as it is, never converted on a guess.
        (hub("1" * 40, "sha256:aa"), hub(None, None), UNKNOWN),
        # A load naming a directory where the copy came from the hub.
        (hub("1" * 40, "sha256:aa"), directory("/a"), CHANGED),
        # OpenCLIP: a tag names fixed weights; a checkpoint file is compared by its files.
        (ModelSource(type="pretrained_tag", location="t"), ModelSource(type="pretrained_tag", location="t"), SAME),
        (ModelSource(type="checkpoint", location="/c.pt", fingerprint="sha256:aa"),
         ModelSource(type="checkpoint", location="/c.pt", fingerprint="sha256:bb"), CHANGED),
    ],
)
def test_the_verdict(recorded, wanted, verdict):
    assert compare(recorded, wanted) is verdict


PACKAGE = ModelSource(type="package", location="/site/m", revision="gt-m==1.0", fingerprint="sha256:cc")


@pytest.mark.parametrize(
    "recorded, wanted, verdict",
    [
        # The revision in the cache: its files decide.
        (hub("1" * 40, "sha256:aa"), hub("2" * 40, "sha256:aa"), SAME),
        (hub("1" * 40, "sha256:aa"), hub("2" * 40, "sha256:bb"), CHANGED),
        # Not in the cache: its commit decides; a name the cache cannot resolve is another revision.
        (hub("1" * 40, "sha256:aa"), hub("1" * 40, None), SAME),
        (hub("1" * 40, "sha256:aa"), hub("v1", None), CHANGED),
        # A copy of anything but that hub repository: changed, whatever the name alone would say.
        (directory("/a"), hub("v1", None), CHANGED),
        (PACKAGE, hub("1" * 40, "sha256:cc"), CHANGED),
        (ModelSource(type="hub", location="org/other", revision="1" * 40, fingerprint="sha256:aa"),
         hub("1" * 40, "sha256:aa"), CHANGED),
    ],
)
def test_the_verdict_on_a_load_that_names_a_revision(recorded, wanted, verdict):
    assert compare(recorded, wanted, pinned=True) is verdict


def test_the_refusal_is_a_409_naming_both_sources():
    error = refusal(ModelRef.named("stale/m"), directory("/srv/a", "sha256:" + "1" * 64), directory("/srv/b", "sha256:" + "2" * 64))
    assert isinstance(error, SourceChanged) and status_of(error) == 409 and error.code == "source_changed"
    assert "directory /srv/a (fingerprint sha256:111111111111)" in error.message
    assert "directory /srv/b (fingerprint sha256:222222222222)" in error.message
    assert "'stale/m'" in error.message and "on_source_change" in error.message
