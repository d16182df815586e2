"""Which modalities a sentence-transformers directory's ``Transformer`` takes, read from its
files as sentence-transformers 6 reads them, before anything is loaded.

The first module's config (``sentence_bert_config.json`` in its folder) names them in
``modality_config`` (a combination joined with ``+``: ``image+text``). A ``Transformer``
saved without one is text-only (the library reads it so, for models saved before it took
other inputs); the deprecated ``CLIPModel`` module takes text and images. A directory with
no ``modules.json`` is a plain transformer the library wraps itself: read here as text, and
the converter checks the modalities of the model it loads.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from embedgate.contract.errors import ConversionError

FileReader = Callable[[str], "str | None"]
TEXT: tuple[str, ...] = ("text",)
# The module configs sentence-transformers tries, in its order.
_CONFIG_FILES = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)
# The deprecated module that wrapped CLIP before Transformer took images.
_LEGACY_CLIP = "CLIPModel"


def modalities_of(read: FileReader, first_module: dict | None) -> tuple[str, ...]:
    """The modalities (``text``, ``image``, ``message``, ``image+text``...) the first module
    of ``modules.json`` (``first_module``: its entry, None without one) declares."""
    if first_module is None:
        return TEXT
    module_type = str(first_module.get("type", ""))
    folder = str(first_module.get("path", "") or "").strip("/")
    config = _module_config(read, folder)
    declared = config.get("modality_config") if config is not None else None
    if isinstance(declared, dict) and declared:
        return tuple(str(key) for key in declared)
    if module_type.rpartition(".")[2] == _LEGACY_CLIP:
        return ("text", "image")
    return TEXT


# What a Transformer may take besides text ("message" is its chat template's input: text,
# or text and these).
MEDIA = frozenset({"image", "audio", "video"})


def takes_media(modalities: tuple[str, ...]) -> bool:
    """Whether any modality (or combination) names images, audio or video."""
    return any(part in MEDIA for modality in modalities for part in modality.split("+"))


def _module_config(read: FileReader, folder: str) -> dict | None:
    for name in _CONFIG_FILES:
        text = read(f"{folder}/{name}" if folder else name)
        if text is None:
            continue
        try:
            value = json.loads(text)
        except ValueError as error:
            raise ConversionError(f"{name} is not valid JSON: {error}") from None
        return value if isinstance(value, dict) else None
    return None
