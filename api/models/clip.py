"""What the registry needs to know about CLIP models: one model, two Triton parts.

A CLIP model is named by the pair (model_name, pretrained) and stored as two Triton models,
``<name>_text_encoder`` and ``<name>_image_encoder`` (:func:`api.names.clip_triton_name`).
The converter publishes the image part first and the text part last, each with the same
metadata.json; the text part also holds the tokenizer. So a model is in the repository
when both parts are, and a single part of it is what an interrupted publish leaves behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import Enum
from pathlib import Path

from embedgate.converters.spec import ModelMetadata, clip_part_names

from ..errors import Forbidden, InvalidInput, ModelNotFound
from ..settings import Settings


class OnDisk(Enum):
    ABSENT = "absent"
    PUBLISHED = "published"
    # One part of this very model: a publish that was cut short. Converting again replaces it.
    HALF_PUBLISHED = "half_published"
    # The directories hold something else (another model, or no embedgate model at all).
    CONFLICT = "conflict"


def is_model(metadata: ModelMetadata | None, model_name: str, pretrained: str) -> bool:
    return (
        metadata is not None
        and metadata.clip is not None
        and metadata.model_name == model_name
        and metadata.clip.pretrained == pretrained
    )


def find_on_disk(
    exists: Callable[[str], bool],
    read_metadata: Callable[[str], ModelMetadata | None],
    triton_name: str,
    model_name: str,
    pretrained: str,
) -> tuple[OnDisk, ModelMetadata | None]:
    """Where the model stands in the repository, read through ``exists`` and
    ``read_metadata`` (the repository's; they may block)."""
    parts = clip_part_names(triton_name)
    present = [part for part in parts if exists(part)]
    if not present:
        return OnDisk.ABSENT, None
    found = [read_metadata(part) for part in present]
    if not all(is_model(metadata, model_name, pretrained) for metadata in found):
        return OnDisk.CONFLICT, None
    if len(present) < len(parts):
        return OnDisk.HALF_PUBLISHED, None
    return OnDisk.PUBLISHED, found[0]


def check_pretrained(settings: Settings, pretrained: str) -> None:
    """A pretrained tag passes; a checkpoint path must be absolute, inside
    ``local_model_dirs`` when that is set, and a file."""
    if "\0" in pretrained:
        raise InvalidInput("pretrained may not contain a NUL character")
    if not os.path.isabs(pretrained):
        if "/" in pretrained or os.sep in pretrained:
            raise InvalidInput("a pretrained checkpoint must be given by its absolute path")
        return
    path = Path(pretrained).resolve()
    roots = [root.resolve() for root in settings.local_model_dirs]
    if roots and not any(path.is_relative_to(root) for root in roots):
        raise Forbidden("pretrained is outside the directories this server loads models from")
    if not path.is_file():
        raise ModelNotFound("pretrained is neither a tag nor a checkpoint file on the server")
