"""The README is the front door: it must document every setting and both commands."""

from pathlib import Path

from api.settings import Settings

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_every_setting_is_documented():
    missing = [f"EMBEDGATE_{name.upper()}" for name in Settings.model_fields if f"`EMBEDGATE_{name.upper()}`" not in README]
    assert missing == []


def test_both_front_door_commands_are_shown():
    assert "make serve" in README and "make test" in README
