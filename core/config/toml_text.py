"""TOML text of config values: writing a config's plain dict, reading one ``--set`` value."""

from __future__ import annotations

import json
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from core.config.fields import toml_key

__all__ = ["parse_override_value", "toml_text", "toml_value", "tomllib"]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def toml_text(sections: dict[str, dict[str, Any]]) -> str:
    """A config's plain dict (``to_dict``) as a TOML document, one table per section."""
    lines: list[str] = []
    for name, values in sections.items():
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        lines.extend(f"{toml_key(key)} = {toml_value(val)}" for key, val in values.items())
    return "\n".join(lines) + "\n"


def parse_override_value(text: str) -> Any:
    """A ``--set`` value in TOML syntax; a bare word is taken as a string (--set optim.name=adam)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (ValueError, RecursionError):  # TOMLDecodeError, too many digits, nested too deeply
        return text
