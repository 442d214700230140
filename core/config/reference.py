"""The config keys' reference page, docs/reference/config.md, written from their declarations.

Every key is declared once, on its section's dataclass (:mod:`core.config.sections`); this module
writes the page from that table (``FIELDS``): each key with its default, the values its check
accepts, what it means (its ``doc``, else its ``help``) and whether a paused run or a fork may
change it. ``python -m core.config.reference`` prints the page; ``--write`` rewrites the file;
tests/test_docs.py fails when the file differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.config.fields import LIVE_EFFECTS, Field
from core.config.sections import SEARCHABLE_SECTIONS, SECTIONS, section_fields
from core.config.toml_text import toml_value

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "config.md"

INTRO = """\
# Config keys

<!-- Generated from the declarations in core/config/sections.py by
`python -m core.config.reference --write`; edit those, not this page. -->

A run's config is a TOML file with the sections below. Every key has a default; unknown keys are
errors. Errors are one line naming the key: `config: parallel.workers must be an integer from 1 to
256, got "two" (in my.toml)`. Every key is declared once, on its dataclass field in
`core/config/sections.py` (`key(...)` puts its check, `Bounds`, choices, whether it is live, its
one-line help and its meaning here in the field's metadata); `FIELDS["section.key"]` is its
`Field` and `BOUNDS["section.key"]` its range. Validation, `--set`, the window's widgets (ranges,
choices, tooltips), `traindesk bench --max-workers` and the advisor read them from there.

*Live* keys may be changed while a run is paused (`LIVE_KEYS`); a section marked *forkable* may be
changed by a fork (`FORKABLE_SECTIONS`); a *searchable* section's keys may be varied by a search.
"""


def _cell(text: str) -> str:
    """Text that stays in one table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def values_of(f: Field) -> str:
    """The values a key's check accepts, in words."""
    b = f.bounds
    if f.type == "int" and b is not None:
        return f"integer {_number(b.lo)} to {_number(b.hi)}"
    if f.type == "float" and b is not None:
        low = f"> {_number(b.lo)}" if b.lo_open else _number(b.lo)
        return f"number {low} to {_number(b.hi)}"
    if f.type == "choice":
        return ", ".join(f"`{c}`" for c in f.choices)
    if f.type == "bool":
        return "`true`, `false`"
    if f.type in ("ints", "floats") and b is not None:
        what = "integers" if f.type == "ints" else "numbers"
        low = f"> {_number(b.lo)}" if b.lo_open else _number(b.lo)
        return f"a list of {what} {low} to {_number(b.hi)}"
    if f.type == "strings":
        return "a list of strings"
    if f.type == "table":
        return "a table of " + ", ".join(f"`{c}`" for c in f.choices)
    if f.type == "source":
        return " ".join(f"`{c}:…`" for c in f.choices)
    if f.type == "model_kind":
        return ", ".join(f"`{c}`" for c in f.choices) + ", `timm:NAME`, `custom:PATH.py:FUNCTION`"
    if f.type == "device":
        return ", ".join(f"`{c}`" for c in f.choices) + ", `cuda:N`"
    if f.key == "model.weights":
        return ", ".join(f"`{c}`" for c in f.choices) + ", a file path"
    if f.type == "space":
        return "ranges and choice lists"
    return "a non-empty string"


def meaning_of(f: Field) -> str:
    text = f.doc or f.help
    if f.live:
        text = text.rstrip(".") + f". *Live*: {LIVE_EFFECTS[f.effect]}."
    return text


def shown_key(section: str, f: Field) -> str:
    """The key as a TOML file writes it; a section of dotted entries shows the entry's form."""
    if SECTIONS[section].dotted_keys and f.type == "space":
        return f'`{section}."section.key"`'
    return f"`{f.key}`"


def shown_default(f: Field) -> str:
    if f.type == "space":
        return ""
    if f.type == "table":
        return "`{}`"
    return f"`{toml_value(f.default)}`"


def section_text(name: str) -> str:
    cls = SECTIONS[name]
    facts = [word for word, yes in (("forkable", cls.forkable), ("searchable", cls.searchable)) if yes]
    lines = [f"## [{name}]", ""]
    described = (cls.__doc__ or "").strip()
    if described and not described.startswith(cls.__name__ + "("):  # a dataclass's own docstring is its signature
        lines += [described.replace("``", "`"), ""]
    if facts:
        lines += ["*" + ", ".join(facts).capitalize() + ".*", ""]
    lines += ["| key | default | values | meaning |", "|---|---|---|---|"]
    for f in section_fields(name):
        row = (shown_key(name, f), shown_default(f), values_of(f), meaning_of(f))
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def render() -> str:
    """The whole page."""
    parts = [INTRO]
    parts += [section_text(name) for name in SECTIONS]
    searchable = ", ".join(f"[{s}]" for s in SEARCHABLE_SECTIONS)
    parts.append(f"A search's space may name a key of {searchable}.\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.config.reference", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"rewrite {PAGE.name} instead of printing it")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        PAGE.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
