"""Whether the repository's copy of a model was made from what a load names, and what the
load does when it was not.

A conversion records its source in ``metadata.json`` (``made_from``: a directory, a
package, a hub snapshot or a checkpoint, with a fingerprint of its files:
``contract/sources/``). A load resolves the source it names now, the same way, and
compares, once, where the conversion is decided: the registry of a single gateway or of
the workers' primary, or the Ray replica that took the request. Restoring the manifest, a
worker taking its primary's models and a replica following the desired state never
compare: they serve the repository's copy, which is what was decided.

- same: the repository's copy is served, as before;
- changed: the model is converted again and published in place of the old copy (which
  keeps serving until the new one is loaded), or, where the load says
  ``on_source_change: "refuse"``, the load is a 409 ``source_changed`` naming both;
- unknown: the copy was converted before sources were recorded, or the files of one side
  cannot be read (a hub model not in the local cache): served as before (never converted
  on a guess), and the listings say so (``made_from`` null, or without a fingerprint).

A load by name alone (no ``model_path``) of a model converted from a directory serves the
repository's copy: the name is what the repository holds, as a restart's manifest brings
it back. A name that resolves to files on this host (a packaged model, the hub cache's
snapshot) is compared.

A load that names a hub ``revision`` asks for that revision: a copy made from anything
else (a directory, a package, another repository) is changed; one made from the hub is the
same where its files are (the fingerprints, where the cache holds the revision), else where
its commit is the one the revision names (a revision this host has no copy of, by a name
the cache cannot resolve, is changed: converting it again downloads it, and a copy of the
same commit comes out the same).
"""

from __future__ import annotations

import asyncio
import logging
from enum import Enum
from typing import Literal

from embedgate.contract.sources import ModelSource, made_from

from ..errors import SourceChanged
from .names import split_variant
from .refs import ModelRef

log = logging.getLogger("embedgate.registry")

# What a load does when the repository's copy was made from another source.
OnSourceChange = Literal["convert", "refuse"]


class SourceVerdict(Enum):
    SAME = "same"
    CHANGED = "changed"
    UNKNOWN = "unknown"


def compare(recorded: ModelSource | None, wanted: ModelSource, pinned: bool = False) -> SourceVerdict:
    """How the source a copy records stands to the one a load resolves now; ``pinned``: the
    load names a hub revision."""
    if recorded is None:
        return SourceVerdict.UNKNOWN
    if pinned:
        if (recorded.type, recorded.location) != (wanted.type, wanted.location):
            return SourceVerdict.CHANGED
        if wanted.fingerprint is not None and recorded.fingerprint is not None:
            return SourceVerdict.SAME if wanted.fingerprint == recorded.fingerprint else SourceVerdict.CHANGED
        return SourceVerdict.SAME if wanted.revision == recorded.revision else SourceVerdict.CHANGED
    if not wanted.named and recorded.type == "directory":
        return SourceVerdict.SAME  # by name alone: the repository's copy
    if wanted.type == recorded.type == "pretrained_tag":
        return SourceVerdict.SAME if wanted.location == recorded.location else SourceVerdict.CHANGED
    if wanted.named and (wanted.type, wanted.location) != (recorded.type, recorded.location):
        return SourceVerdict.CHANGED
    if wanted.fingerprint is None or recorded.fingerprint is None:
        return SourceVerdict.UNKNOWN
    # The files decide: a hub commit that changed only the model card is the same model.
    return SourceVerdict.SAME if wanted.fingerprint == recorded.fingerprint else SourceVerdict.CHANGED


async def source_verdict(
    ref: ModelRef, recorded: ModelSource | None, model_path: str | None, revision: str | None = None
) -> tuple[SourceVerdict, ModelSource | None]:
    """The verdict on a load of ``ref`` (from ``model_path``, for a sentence-transformer; at
    a hub ``revision``), and the source it resolved (None where nothing had to be read to decide)."""
    if recorded is None:
        return SourceVerdict.UNKNOWN, None
    if model_path is None and ref.pretrained is None and revision is None and recorded.type == "directory":
        return SourceVerdict.SAME, None  # by name alone: the repository's copy
    # The files are read (and hashed) in a thread: never on the event loop. A variant is
    # made from its model's source.
    wanted = await asyncio.to_thread(
        made_from, ref.library, split_variant(ref.model_name)[0], model_path, ref.pretrained, revision
    )
    return compare(recorded, wanted, pinned=revision is not None), wanted


async def converts_again(
    ref: ModelRef,
    recorded: ModelSource | None,
    on_source_change: OnSourceChange,
    model_path: str | None,
    revision: str | None = None,
) -> bool:
    """Whether a load of ``ref`` converts it again: its copy, which records ``recorded``,
    was made from another source than the load names (refused where the load says so)."""
    verdict, wanted = await source_verdict(ref, recorded, model_path, revision)
    if verdict is SourceVerdict.UNKNOWN:
        log.info("%s: the source of the repository's copy cannot be compared; serving it as it is", ref.key)
    if verdict is not SourceVerdict.CHANGED:
        return False
    assert recorded is not None and wanted is not None
    if on_source_change == "refuse":
        raise refusal(ref, recorded, wanted)
    log.warning(
        "%s: the repository's copy was converted from %s; this load names %s: converting it again",
        ref.key, recorded.described(), wanted.described(),
    )
    return True


def refusal(ref: ModelRef, recorded: ModelSource, wanted: ModelSource) -> SourceChanged:
    """The 409 of a load that asked not to convert again: both sources, and what to do."""
    return SourceChanged(
        f"model '{ref.described()}' in the repository was converted from {recorded.described()}, and this load "
        f"names {wanted.described()}; on_source_change is 'refuse', so nothing was converted: load it with "
        "on_source_change 'convert' to convert it again in place of the old copy"
    )
