"""User model names and the Triton names they map to.

A user names a model the way the hub does (``org/name`` or ``name``). That name reaches
the filesystem (a repository directory) and Triton's URLs, so it is checked here and
nowhere else lets one through unchecked. The mapping is injective: ``/`` becomes
``--``, and ``--`` is refused inside a name (as the hub itself does).
"""

from __future__ import annotations

import re

from .errors import InvalidModelName

_SEGMENT = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
_NAME = re.compile(rf"^{_SEGMENT}(?:/{_SEGMENT})?$")
_TRITON_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,190}$")
SEPARATOR = "--"


def validate_model_name(name: str) -> str:
    """Return ``name`` if it is a safe model name, else raise InvalidModelName."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidModelName(
            "model_name must be 'name' or 'org/name' using letters, digits, '.', '_' and '-' "
            "(each part starting and ending with a letter or digit, at most 96 characters)"
        )
    if SEPARATOR in name or ".." in name:
        raise InvalidModelName("model_name must not contain '--' or '..'")
    return name


def to_triton_name(name: str) -> str:
    """The Triton model (and repository directory) name for a user model name."""
    return validate_model_name(name).replace("/", SEPARATOR)


def from_triton_name(triton_name: str) -> str:
    """The user model name for a Triton name made by :func:`to_triton_name`."""
    return triton_name.replace(SEPARATOR, "/", 1)


def is_triton_name(name: str) -> bool:
    return bool(_TRITON_NAME.match(name)) and ".." not in name
