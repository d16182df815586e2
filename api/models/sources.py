"""Where a load may read a model from, checked against the settings before any conversion:
a sentence-transformers directory (``model_path``) or an OpenCLIP checkpoint file
(``pretrained``), absolute and inside ``local_model_dirs`` when that is set, or a hub
repository (``hf-hub:org/name``) at a ``revision``; and whether the model's own code may
run (``trust_remote_code``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from embedgate.contract.sources import hub_repo

from ..errors import Forbidden, InvalidInput, InvalidModelName, ModelNotFound
from ..settings import Settings
from .names import split_variant, validate_model_name

_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


def _inside_allowed(settings: Settings, path: Path, what: str) -> None:
    roots = [root.resolve() for root in settings.local_model_dirs]
    if roots and not any(path.is_relative_to(root) for root in roots):
        raise Forbidden(f"{what} is outside the directories this server loads models from")


def check_model_path(settings: Settings, model_path: str | None, trust_remote_code: bool) -> str | None:
    """A request's model_path (resolved) and trust_remote_code, checked."""
    if trust_remote_code and not settings.allow_trust_remote_code:
        raise Forbidden("trust_remote_code is disabled on this server")
    if model_path is None:
        return None
    path = Path(model_path)
    if not path.is_absolute() or "\0" in model_path:
        raise InvalidInput("model_path must be an absolute path")
    resolved = path.resolve()
    _inside_allowed(settings, resolved, "model_path")
    if not resolved.is_dir():
        raise ModelNotFound("model_path is not a directory on the server")
    return str(resolved)


def check_revision(revision: str | None, *, model_path: str | None = None, pretrained: str | None = None) -> None:
    """A hub revision: a branch, a tag or a commit, of a model that comes from the hub."""
    if revision is None:
        return
    if not _REVISION.fullmatch(revision) or ".." in revision or "//" in revision or revision.endswith("/"):
        raise InvalidInput(
            "revision must be a hub branch, tag or commit: letters, digits, '.', '_', '-' and '/' (no '..', no "
            "empty part), at most 200 characters"
        )
    if model_path is not None:
        raise InvalidInput("revision is for a model from the hub; model_path names a directory of this server")
    if pretrained is not None and hub_repo(pretrained) is None:
        raise InvalidInput("revision is for an OpenCLIP model from the hub: give pretrained as 'hf-hub:org/name'")


def check_pretrained(settings: Settings, pretrained: str) -> None:
    """A pretrained tag passes, and a hub repository of a valid name; a checkpoint path must
    be absolute, inside ``local_model_dirs`` when that is set, and a file."""
    if "\0" in pretrained:
        raise InvalidInput("pretrained may not contain a NUL character")
    repo = hub_repo(pretrained)
    if repo is not None:
        try:
            if split_variant(validate_model_name(repo))[1] is not None:
                raise InvalidModelName("a hub repository's name has no variant")
        except InvalidModelName as error:
            message = f"pretrained 'hf-hub:<repository>' must name one as 'org/name': {error.message}"
            raise InvalidInput(message) from None
        return
    if not os.path.isabs(pretrained):
        if "/" in pretrained or os.sep in pretrained:
            raise InvalidInput("a pretrained checkpoint must be given by its absolute path")
        return
    path = Path(pretrained).resolve()
    _inside_allowed(settings, path, "pretrained")
    if not path.is_file():
        raise ModelNotFound("pretrained is neither a tag nor a checkpoint file on the server")
