"""[search]: its own keys and the "section.key" entries that make up the space a search varies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.config.fields import check_float, check_int, fail, is_bool, show, toml_key
from core.config.sections import FIELDS, SEARCHABLE_SECTIONS, SearchRange, section_defaults
from core.errors import ConfigError

__all__ = ["check_space", "checked_space", "searchable", "space_values"]


def searchable(key: str) -> Any:
    """The Field of a key a search may vary (ConfigError for any other)."""
    section, _, _name = key.partition(".")
    f = FIELDS.get(key) if section in SEARCHABLE_SECTIONS else None
    if f is None:
        raise ConfigError(
            f"config: search key {show(key)} is not a key a search can vary "
            f"(keys of [{'], ['.join(SEARCHABLE_SECTIONS)}])"
        )
    return f


def _within(where: str, check: Any, *args: Any) -> Any:
    """A check whose error names the space entry it is in."""
    try:
        return check(*args)
    except ConfigError as exc:
        raise ConfigError(f"config: {where}: {str(exc).removeprefix('config: ')}") from None


def check_space(key: str, value: Any) -> Any:
    """A search range ``{low, high, log}`` (SearchRange) or a list of choices (tuple), checked."""
    f = searchable(key)
    default = f.default
    where = f"search.{toml_key(key)}"
    if isinstance(value, SearchRange):
        value = value._asdict()
    if isinstance(value, Mapping):
        extra = sorted(set(value) - {"low", "high", "log"})
        if extra or "low" not in value or "high" not in value:
            raise fail(where, "a list of choices or a table {low, high, log}", value)
        numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
        if not numeric:
            raise fail(where, f"a list of choices ({key} is not a number)", value)
        check = check_int if isinstance(default, int) else check_float
        low, high = _within(where, check, f, value["low"]), _within(where, check, f, value["high"])
        log = is_bool(f"{where}.log", value.get("log", False))
        if not low < high:
            raise fail(where, "a range with low below high", value)
        if log and low <= 0:
            raise fail(where, "a range above 0 when log = true", value)
        return SearchRange(low, high, log)
    if not isinstance(value, (list, tuple)) or not value or len(value) > 1000:
        raise fail(where, "a list of choices (1 to 1000) or a table {low, high, log}", value)
    return tuple(_within(where, f.validate, choice) for choice in value)


def space_values(section: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """[search]: its own keys, and "section.key" entries that make up the space (checked)."""
    values = section_defaults(section)
    known = set(values) - {"space"}
    space = []
    for name, value in given.items():
        if "." in name:
            searchable(name)
            space.append((name, value))
        elif name in known:
            values[name] = value
        else:
            raise ConfigError(
                f"config: unknown key {section}.{toml_key(name)}; known keys: "
                + ", ".join(sorted(known))
                + ', and "section.key" ranges'
            )
    values["space"] = space
    return values


def checked_space(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each space entry checked, after the section's own keys."""
    values["space"] = tuple((name, check_space(name, value)) for name, value in values["space"])
    return values
