"""The documents say what is there: the config reference is the declarations', named paths exist, links land."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config import FIELDS
from core.config.reference import PAGE, render

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "reference").glob("*.md"))

# Paths named before they exist, each to be removed from here when it lands.
COMING: set[str] = set()

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE = re.compile(r"`([^`\n]+)`")
_REPO_PATH = re.compile(r"(?:core|app|tests|docs|bench|resources)/[\w./-]*")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(path: Path) -> str:
    """A page's text without its fenced blocks (pictures and listings, not names)."""
    return _FENCE.sub("", path.read_text(encoding="utf-8"))


def named_paths(text: str) -> set[str]:
    """The repository paths a text names in backticks (`core/session/`, `app/main_window.py`)."""
    return {code for code in _CODE.findall(text) if _REPO_PATH.fullmatch(code)}


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in _prose(path).splitlines() if line.startswith("#")}


def test_the_config_reference_is_the_declarations() -> None:
    """docs/reference/config.md is what the declarations write (regenerate: python -m core.config.reference --write)."""
    assert PAGE.read_text(encoding="utf-8") == render()


def test_every_config_key_says_what_it_means() -> None:
    assert [k for k, f in FIELDS.items() if not (f.doc or f.help)] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_the_pages_name_exists(page: Path) -> None:
    missing = sorted(p for p in named_paths(_prose(page)) if p not in COMING and not (ROOT / p).exists())
    assert missing == []


def test_the_coming_paths_are_still_to_come() -> None:
    """A path in COMING that now exists is checked like any other: take it out of the list."""
    assert [p for p in sorted(COMING) if (ROOT / p).exists()] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_between_the_pages_lands(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, fragment = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists() or (fragment and dest.suffix == ".md" and fragment not in anchors(dest)):
            broken.append(target)
    assert broken == []


def test_the_checks_see_what_they_should() -> None:
    assert named_paths("`core/session/` and `core.session` and `app/x.py` and `runs/<name>`") == {
        "core/session/",
        "app/x.py",
    }
    assert anchor("Tables: one schema") == "tables-one-schema"
    assert anchor("The path of the window's Start") == "the-path-of-the-windows-start"
    assert anchor("Serving (`core/services/serve/`, `traindesk serve`)") == "serving-coreservicesserve-traindesk-serve"
