"""Where a model stands in the repository: absent, published, half published or in conflict.

A model is one Triton model, or several (a CLIP model's text and image towers, a multimodal
model's text and image graphs) published together: the converter publishes the first part
last (``converters/__main__.py``), each part with the same metadata.json. So a model is in
the repository when all its parts are, and some of them alone are what an interrupted
publish (or delete) leaves behind. Which parts a sentence-transformers model has, its first
part's metadata says (a multimodal one's image graph).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from embedgate.contract.spec import ModelMetadata

from .refs import ModelRef


class OnDisk(Enum):
    ABSENT = "absent"
    PUBLISHED = "published"
    # Some parts of this very model: a publish that was cut short. Converting again replaces it.
    HALF_PUBLISHED = "half_published"
    # The directories hold something else (another model, or no embedgate model at all).
    CONFLICT = "conflict"


def find_on_disk(
    exists: Callable[[str], bool],
    read_metadata: Callable[[str], ModelMetadata | None],
    ref: ModelRef,
) -> tuple[OnDisk, ModelMetadata | None]:
    """Where ``ref`` stands, read through ``exists`` and ``read_metadata`` (the repository's;
    they may block)."""
    present = [part for part in ref.every_part() if exists(part)]
    if not present:
        return OnDisk.ABSENT, None
    found = dict(zip(present, (read_metadata(part) for part in present)))
    if not all(ref.owns(metadata) for metadata in found.values()):
        return OnDisk.CONFLICT, None
    first = found.get(ref.parts()[0])
    if first is None or any(part not in found for part in ref.parts_of(first)):
        return OnDisk.HALF_PUBLISHED, None
    return OnDisk.PUBLISHED, first
