"""The wheel installs the folders under the project's own name: the package list in
pyproject.toml is every package folder on disk, and nothing installs as a generic
top-level ``api`` or ``converters``."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def packages() -> list[str]:
    return PYPROJECT["tool"]["setuptools"]["packages"]


def test_every_package_folder_is_in_the_wheel():
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    on_disk = set()
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join((package, *relative)))
    assert sorted(packages()) == sorted(on_disk)


def test_every_folder_with_python_is_a_package():
    folders = {
        path.parent
        for folder in PYPROJECT["tool"]["setuptools"]["package-dir"].values()
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists()) == []


def test_everything_installs_under_embedgate():
    assert all(package.startswith("embedgate.") for package in packages())
    assert PYPROJECT["project"]["scripts"]["embedgate"].startswith("embedgate.")
