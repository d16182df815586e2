"""How each side finds its kinds: every module of a package, imported, and what they
define. A kind is a module (or a package) in its side's ``kinds/``; no list names them,
so a new kind is a new module on each side and nothing else."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType
from typing import TypeVar

T = TypeVar("T")


def modules(package: str, path: Iterable[str]) -> list[ModuleType]:
    """Every module of ``package`` (whose ``__path__`` is ``path``), its subpackages' too,
    imported, in the order of their names."""
    return [importlib.import_module(found.name) for found in pkgutil.walk_packages(path, prefix=package + ".")]


def classes(found: Iterable[ModuleType], base: type[T], attribute: str) -> list[type[T]]:
    """The subclasses of ``base`` the modules define (not those they import) that set
    ``attribute`` themselves (the kind they are; the bases between set none)."""
    return [
        value
        for module in found
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, base)
        and value.__module__ == module.__name__ and attribute in vars(value)
    ]
