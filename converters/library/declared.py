"""What a sentence-transformers directory declares itself to be, read from its files.

sentence-transformers has several model classes: ``SentenceTransformer`` (dense
embeddings), ``SparseEncoder`` (SPLADE: sparse vectors over the vocabulary),
``CrossEncoder`` (a score per text pair) and ``MultiVectorEncoder`` (ColBERT). A directory
says which it is in ``config_sentence_transformers.json`` (``model_type``); CrossEncoders
saved before that file existed are plain Hugging Face sequence-classification models.
Loading one with another class does not fail: it silently builds a different model (a
CrossEncoder loaded as a SentenceTransformer is a mean-pooled encoder with its classifier
thrown away). So the kind is read first, from the files, and a directory is only ever
converted by the converter of its own kind (``converters/kinds/``), or refused with the
reason.

Custom modules (``modules.json`` naming a class outside sentence-transformers) and an
architecture of the model's own (``config.json``'s ``auto_map`` naming its modeling files,
for a ``model_type`` transformers does not have: jina-bert, gte's new...) run code from
the model's files: they are refused unless ``trust_remote_code`` is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from embedgate.contract import kinds
from embedgate.contract.errors import ConversionError, RemoteCodeRefused, UnsupportedModelError
from embedgate.converters.library.modalities import TEXT, modalities_of

# sentence-transformers' classes, as the contract's kinds declare them (contract/kinds/).
KNOWN_KINDS: tuple[str, ...] = tuple(
    dict.fromkeys(kind.library_class for kind in kinds.KINDS.values() if kind.library_class)
)
LIBRARY_PREFIX = "sentence_transformers."
# read(filename): a model file's text, or None where the model has no such file.
FileReader = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Declared:
    kind: str
    # Where the kind was read from, for messages.
    evidence: str
    # modules.json's module classes, in order (empty where there is none).
    modules: tuple[str, ...] = ()
    # What its first module (a Transformer) takes: "text", "image", "image+text"...
    # (library/modalities.py).
    modalities: tuple[str, ...] = TEXT


def read_declared(read: FileReader) -> Declared:
    """The kind a model declares, from ``read(filename) -> text | None``."""
    entries = _module_entries(read("modules.json"))
    modules = tuple(str(entry.get("type", "")) for entry in entries)
    settings = _json(read("config_sentence_transformers.json"), "config_sentence_transformers.json")
    if settings is not None and settings.get("model_type"):
        modalities = modalities_of(read, entries[0] if entries else None)
        return Declared(str(settings["model_type"]), "config_sentence_transformers.json", modules, modalities)
    if not modules:
        config = _json(read("config.json"), "config.json") or {}
        architectures = config.get("architectures") or []
        if "sentence_transformers" in config or any(
            str(name).endswith("ForSequenceClassification") for name in architectures
        ):
            return Declared("CrossEncoder", "config.json (a sequence-classification model)", modules)
    evidence = "modules.json" if modules else "a plain transformer (mean pooling)"
    return Declared("SentenceTransformer", evidence, modules, modalities_of(read, entries[0] if entries else None))


def unsupported(declared: Declared, served: tuple[str, ...]) -> UnsupportedModelError:
    """The error for a directory of a kind no converter serves (``served`` are those that are)."""
    known = declared.kind in KNOWN_KINDS
    what = f"a {declared.kind}" if known else f"of an unknown model_type {declared.kind!r}"
    return UnsupportedModelError(
        f"the model is {what} (per {declared.evidence}); embedgate serves {', '.join(served)} models, "
        "and serving it as one of those would compute something else"
    )


def check_custom_modules(declared: Declared, *, trust_remote_code: bool) -> None:
    """Raises :class:`RemoteCodeRefused` where the model's modules would run its own code
    and the request does not allow that."""
    custom = [name for name in declared.modules if not name.startswith(LIBRARY_PREFIX)]
    if custom and not trust_remote_code:
        raise RemoteCodeRefused(
            f"the model uses custom modules ({', '.join(custom)}) that run code from its directory: "
            "load it with trust_remote_code (where the server allows it)"
        )


def check_modeling_code(read: FileReader, *, trust_remote_code: bool) -> None:
    """Raises :class:`RemoteCodeRefused` where the model's architecture is code of its own
    (``auto_map`` in its ``config.json``, for a ``model_type`` transformers does not have)
    and the request does not allow running it. A model whose type transformers has loads
    transformers' own class without it, as the library loads it."""
    if trust_remote_code:
        return
    config = _json(read("config.json"), "config.json") or {}
    auto_map = config.get("auto_map") or {}
    if not isinstance(auto_map, dict) or not auto_map or _known_model_type(config.get("model_type")):
        return
    files = sorted({str(target).split("--")[-1].rpartition(".")[0] + ".py" for target in auto_map.values() if target})
    raise RemoteCodeRefused(
        f"the model's architecture ({config.get('model_type') or '?'}) is code of its own "
        f"({', '.join(files) or 'its auto_map'}), which runs when it is loaded: load it with trust_remote_code "
        "(where the server allows it)"
    )


def _known_model_type(model_type: object) -> bool:
    from transformers import CONFIG_MAPPING

    return isinstance(model_type, str) and model_type in CONFIG_MAPPING


def model_files(location: str | Path) -> FileReader:
    """Files of a model directory or hub id, through sentence-transformers' own lookup
    (the directory; else its cache, or the hub where the conversion may use the network)."""
    from sentence_transformers.util.file_io import load_file_path

    def read(filename: str) -> str | None:
        path = load_file_path(str(location), filename)
        return Path(path).read_text(encoding="utf-8") if path else None

    return read


def _json(text: str | None, name: str) -> dict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConversionError(f"{name} is not valid JSON: {error}") from None
    return value if isinstance(value, dict) else None


def _module_entries(text: str | None) -> list[dict]:
    """modules.json's entries (each module's type and folder), in order."""
    if text is None:
        return []
    try:
        entries = json.loads(text)
    except ValueError as error:
        raise ConversionError(f"modules.json is not valid JSON: {error}") from None
    if not isinstance(entries, list):
        raise ConversionError("modules.json is not a list of modules")
    return [entry for entry in entries if isinstance(entry, dict)]
