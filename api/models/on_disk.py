"""Where a model stands in the repository: absent, published, half published or in conflict.

A model is one Triton model, or several (a CLIP model's text and image towers) published
together: the converter publishes the first part last (``converters/__main__.py``), each
part with the same metadata.json. So a model is in the repository when all its parts are,
and some of them alone are what an interrupted publish leaves behind.
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
    parts = ref.parts()
    present = [part for part in parts if exists(part)]
    if not present:
        return OnDisk.ABSENT, None
    found = [read_metadata(part) for part in present]
    if not all(ref.owns(metadata) for metadata in found):
        return OnDisk.CONFLICT, None
    if len(present) < len(parts):
        return OnDisk.HALF_PUBLISHED, None
    return OnDisk.PUBLISHED, found[0]
