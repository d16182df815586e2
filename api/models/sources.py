"""Where a load may read a model from, checked against the settings before any conversion:
a sentence-transformers directory (``model_path``) or an OpenCLIP checkpoint file
(``pretrained``), absolute and inside ``local_model_dirs`` when that is set; and whether
the model's own code may run (``trust_remote_code``)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import Forbidden, InvalidInput, ModelNotFound
from ..settings import Settings


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
    _inside_allowed(settings, path, "pretrained")
    if not path.is_file():
        raise ModelNotFound("pretrained is neither a tag nor a checkpoint file on the server")
