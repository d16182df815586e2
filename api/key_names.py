"""Names for keys (``EMBEDGATE_KEY_NAMES``: ``name=key`` pairs), which per-key metrics show
instead of a short hash. Checked with the settings; an error names the entry by its place
and its name, never by its key."""

from __future__ import annotations

import re
from collections.abc import Iterable

# A Prometheus label value that reads as a name.
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def parse_key_names(entries: Iterable[str], keys: set[str]) -> dict[str, str]:
    """Each named key's name, by key; ``keys``: the configured API and admin keys."""
    names: dict[str, str] = {}
    for number, entry in enumerate(entries, 1):
        name, sign, key = entry.partition("=")
        name, key = name.strip(), key.strip()
        if not sign or not KEY_NAME.fullmatch(name):
            raise ValueError(
                f"key_names entry {number} must be name=key, the name of letters, digits, '_', '.' and '-'"
            )
        if key not in keys:
            raise ValueError(f"key_names entry {number} ({name}) names a key that is not an API or admin key")
        if name in names.values() or key in names:
            raise ValueError(f"key_names entry {number} ({name}) repeats a name or a key")
        names[key] = name
    return names
