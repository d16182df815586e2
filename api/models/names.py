"""User model names and the Triton names they map to.

A user names a model the way the hub does (``org/name`` or ``name``). That name reaches
the filesystem (a repository directory) and Triton's URLs, so it is checked here and
nowhere else lets one through unchecked. The mapping is injective: ``/`` becomes
``--``, and ``--`` is refused inside a name (as the hub itself does).

A load-time variant is a model of its own, named ``<name>@optimized`` or ``<name>@int8``
(``@`` is valid nowhere else in a name); its Triton name is ``<triton name>---<variant>``.
``---`` never occurs in a mapped name: ``--`` only stands for ``/``, between segments that
start with a letter or digit and end with one or ``_``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePath

from embedgate.contract.spec import VARIANT_MARK, VARIANTS, Variant, clip_part_names

from ..errors import InvalidModelName

_SEGMENT = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
_NAME = re.compile(rf"^{_SEGMENT}(?:/{_SEGMENT})?$")
_TRITON_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,190}$")
SEPARATOR = "--"
VARIANT_SEPARATOR = "---"


def split_variant(name: str) -> tuple[str, Variant | None]:
    """(model name, variant) of a user name: ``("org/name", "int8")`` for ``org/name@int8``;
    a name without a variant suffix is returned whole, with None."""
    base, mark, suffix = name.rpartition(VARIANT_MARK)
    for variant in VARIANTS:
        if mark and suffix == variant:
            return base, variant
    return name, None


def validate_model_name(name: str) -> str:
    """Return ``name`` if it is a safe model name, else raise InvalidModelName."""
    base = split_variant(name)[0] if isinstance(name, str) else name
    if not isinstance(base, str) or not _NAME.fullmatch(base):
        raise InvalidModelName(
            "model_name must be 'name' or 'org/name' using letters, digits, '.', '_' and '-' "
            "(each part starting and ending with a letter or digit, at most 96 characters), "
            "optionally followed by '@optimized' or '@int8'"
        )
    if SEPARATOR in base or ".." in base:
        raise InvalidModelName("model_name must not contain '--' or '..'")
    return name


def to_triton_name(name: str) -> str:
    """The Triton model (and repository directory) name for a user model name."""
    base, variant = split_variant(validate_model_name(name))
    triton_name = base.replace("/", SEPARATOR)
    return triton_name if variant is None else f"{triton_name}{VARIANT_SEPARATOR}{variant}"


def from_triton_name(triton_name: str) -> str:
    """The user model name for a Triton name made by :func:`to_triton_name`."""
    base, separator, suffix = triton_name.rpartition(VARIANT_SEPARATOR)
    if separator and suffix in VARIANTS:
        return f"{base.replace(SEPARATOR, '/', 1)}{VARIANT_MARK}{suffix}"
    return triton_name.replace(SEPARATOR, "/", 1)


def is_triton_name(name: str) -> bool:
    return bool(_TRITON_NAME.fullmatch(name)) and ".." not in name


# --- CLIP models: a (model_name, pretrained) pair names one model of two Triton parts.
_TAG = re.compile(rf"^{_SEGMENT}$")
CLIP_KEY_SEPARATOR = ":"


def clip_triton_name(model_name: str, pretrained: str) -> str:
    """``<model_name>_<pretrained>``, as the seed named CLIP models (``ViT-B-32_laion2b_s34b_b79k``).

    A pretrained that is not a safe name (a checkpoint path) never reaches Triton or the
    filesystem as it is: it becomes the file's stem plus a hash of the whole value.
    """
    if "/" in model_name:
        raise InvalidModelName("a CLIP model_name is an OpenCLIP architecture such as 'ViT-B-32' (no '/')")
    if split_variant(validate_model_name(model_name))[1] is not None:
        raise InvalidModelName("'@optimized' and '@int8' variants are for sentence-transformer models, not CLIP")
    if _TAG.fullmatch(pretrained) and SEPARATOR not in pretrained and ".." not in pretrained:
        tag = pretrained
    else:
        stem = re.sub(r"[^A-Za-z0-9_]+", "-", PurePath(pretrained).stem).strip("-_")[:48] or "checkpoint"
        tag = f"{stem}-{hashlib.sha256(pretrained.encode()).hexdigest()[:10]}"
    name = f"{model_name}_{tag}"
    if not all(is_triton_name(part) for part in clip_part_names(name)):
        raise InvalidModelName("model_name and pretrained are too long for a Triton model name")
    return name


def clip_key(model_name: str, pretrained: str) -> str:
    """The registry's key for a CLIP model (model names cannot contain the separator)."""
    return f"{model_name}{CLIP_KEY_SEPARATOR}{pretrained}"


def split_clip_key(key: str) -> tuple[str, str] | None:
    """(model_name, pretrained) for a key made by :func:`clip_key`; None for other names."""
    model_name, separator, pretrained = key.partition(CLIP_KEY_SEPARATOR)
    return (model_name, pretrained) if separator and pretrained else None
