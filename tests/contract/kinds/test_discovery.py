"""Kinds are found, not listed: every module of a package (its subpackages' too) is
imported, and the classes they define that name their kind are the kinds."""

from __future__ import annotations

import sys

import pytest

from embedgate.contract.kinds import discovery


class Base:
    pass


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "found_kinds"
    (root / "nested").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "plain.py").write_text(
        f"from {__name__} import Base\n"
        "class Plain(Base):\n    kind = 'plain'\n"
        "class Helper(Base):\n    pass\n"
    )
    (root / "nested" / "__init__.py").write_text("")
    (root / "nested" / "converter.py").write_text(
        f"from {__name__} import Base\nfrom found_kinds.plain import Plain\nclass Nested(Base):\n    kind = 'nested'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in [name for name in sys.modules if name.split(".")[0] == "found_kinds"]:
        del sys.modules[name]


def test_a_module_anywhere_in_the_package_is_found(package):
    import found_kinds

    modules = discovery.modules("found_kinds", found_kinds.__path__)
    assert [module.__name__ for module in modules] == [
        "found_kinds.nested", "found_kinds.nested.converter", "found_kinds.plain"
    ]
    # Each kind once, where it is defined (not where it is imported); a class that names no kind is none.
    assert [cls.__name__ for cls in discovery.classes(modules, Base, "kind")] == ["Nested", "Plain"]
