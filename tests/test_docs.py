"""The README is the front door and docs/ is the manual: both must stay complete and findable."""

from pathlib import Path

import yaml

from embedgate.api.settings import Settings

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def _nav_pages(entries: list) -> set[str]:
    pages: set[str] = set()
    for entry in entries:
        if isinstance(entry, str):
            pages.add(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_setting_is_documented():
    configuration = (DOCS / "configuration.md").read_text()
    missing = [
        f"EMBEDGATE_{name.upper()}"
        for name in Settings.model_fields
        if f"`EMBEDGATE_{name.upper()}`" not in configuration
    ]
    assert missing == []


def test_both_front_door_commands_are_shown():
    assert "make serve" in README and "make test" in README


def test_readme_stays_a_front_door():
    assert len(README.splitlines()) <= 250


def test_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    assert pages - _nav_pages(config["nav"]) == set()


def test_the_architecture_layout_matches_the_tree():
    """Every package folder of the gateway, and every module of the layers the page lists
    one by one, is on the architecture page's layout; nothing there is gone from the tree."""
    page = (DOCS / "architecture.md").read_text()
    layout = page.split("## Layout", 1)[1].split("```", 2)[1]
    api = ROOT / "api"
    folders = {path.parent for path in api.rglob("__init__.py")} - {api}
    missing = [f"{folder.name}/" for folder in folders if f"{folder.name}/" not in layout]
    for layer in (api, api / "http", api / "compute", api / "models", api / "triton"):
        missing += [p.name for p in layer.glob("*.py") if not p.name.startswith("__") and p.name not in layout]
    assert missing == []
    listed = {word for line in layout.splitlines() for word in line.split() if word.endswith(".py")}
    existing = {path.name for path in ROOT.glob("**/*.py") if ".venv" not in path.parts}
    assert listed - existing == set()
