"""What the warm converter imports before its first conversion, and what only at the first
conversion that needs it (the process itself is tested through the gateway's
``run_conversion``: tests/api/models/test_warm_converter.py)."""

from __future__ import annotations

import pytest

from embedgate.converters import warm


@pytest.fixture
def imported(monkeypatch) -> list[str]:
    names: list[str] = []
    monkeypatch.setattr(warm.importlib, "import_module", names.append)
    return names


def test_every_conversions_libraries_come_first_and_open_clip_is_not_among_them(imported):
    warm._preload()
    assert {"torch", "sentence_transformers", "onnxruntime", "embedgate.converters.__main__"} <= set(imported)
    assert "open_clip" not in imported


def test_a_clip_conversion_imports_open_clip_for_itself_and_those_after_it(imported):
    warm._import_for(b"go sentence_transformers")
    warm._import_for(b"go")
    assert imported == []
    warm._import_for(b"go open_clip")
    assert imported == ["open_clip"]


def test_a_library_that_is_not_installed_is_left_to_the_conversion_to_report(monkeypatch):
    def missing(name: str) -> None:
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(warm.importlib, "import_module", missing)
    warm._import_for(b"go open_clip")
