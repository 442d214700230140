"""A config field's facts and the checks that validate a value of it.

Each key of the config is declared once, on its section's dataclass, with
:func:`key`: its check, bounds, choices, whether a paused run may change it
(live) and a line of help. :mod:`core.config.sections` gathers those
declarations into the one table (``FIELDS``) that validation, ``--set``,
live changes and the window's widgets read.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from core.config.timm_kind import is_timm, timm_name
from core.errors import ConfigError

SHOW_MAX = 80  # characters of a bad value quoted in an error message
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class Bounds(NamedTuple):
    """The range of a numeric key (of each item, for a list); the window's widgets take it too."""

    lo: float
    hi: float
    lo_open: bool = False  # lo itself is not allowed (a learning rate above 0)


Check = Callable[["Field", Any], Any]

# What a live key does to a running worker when a paused run resumes with a new value; the
# worker has one handler per effect (core.worker.trainer), so a live key cannot go unapplied.
LIVE_EFFECTS: dict[str, str] = {
    "optimizer": "every parameter group takes the new value at the next step",
    "batches": "the epoch goes on from its offset in batches of the new size",
    "loop": "the training loop reads it at each epoch's end",
}


@dataclass(frozen=True)
class Field:
    """One key of the config: ``section.name`` and everything known about its values."""

    key: str
    type: str  # what its check accepts: int, float, bool, str, choice, ints, floats, ...
    default: Any
    check: Check
    bounds: Bounds | None = None
    choices: tuple[str, ...] = ()
    effect: str = ""  # a paused run may change it; what that does (a LIVE_EFFECTS key)
    forkable: bool = False  # a fork of a run may change it
    help: str = ""  # one line: the window's tooltip
    doc: str = ""  # the reference's meaning (docs/reference/config.md) where it says more than help

    @property
    def live(self) -> bool:
        """A paused run may change it (every worker applies it at the same batch)."""
        return bool(self.effect)

    @property
    def section(self) -> str:
        return self.key.partition(".")[0]

    @property
    def name(self) -> str:
        return self.key.partition(".")[2]

    def validate(self, value: Any) -> Any:
        """The value, normalised (lists as tuples); ConfigError naming the key otherwise."""
        return self.check(self, value)


def key(
    default: Any,
    check: Check,
    type: str,
    *,
    bounds: Bounds | tuple[float, float] | None = None,
    choices: Sequence[str] = (),
    effect: str = "",
    help: str = "",
    doc: str = "",
) -> Any:
    """Declare a section's key (a dataclass field carrying its facts).

    ``effect`` makes it live: a paused run may change it, and it names what the change does
    to a running worker (one of :data:`LIVE_EFFECTS`). ``help`` is the window's one-line tooltip;
    ``doc`` is what the key means in docs/reference/config.md when that says more than ``help``.
    """
    if effect and effect not in LIVE_EFFECTS:
        raise ValueError(f"live effect {effect!r} is not one of {', '.join(LIVE_EFFECTS)}")
    if bounds is not None and not isinstance(bounds, Bounds):
        bounds = Bounds(*bounds)
    facts = {
        "type": type,
        "check": check,
        "bounds": bounds,
        "choices": tuple(choices),
        "effect": effect,
        "help": help,
        "doc": doc,
    }
    return field(default=default, metadata=facts)


# -- quoting values and keys in one-line messages ------------------------------------------


def show(value: Any) -> str:
    """A bad value as one short line: strings quoted and escaped, long values cut."""
    if isinstance(value, str):
        text = json.dumps(value)
    elif isinstance(value, (list, tuple)):
        if len(value) > 8:
            text = "[" + ", ".join(show(v) for v in value[:8]) + ", ...]"
        else:
            text = "[" + ", ".join(show(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "a table"
    elif isinstance(value, (datetime.date, datetime.time)):  # TOML dates and times
        text = value.isoformat()
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOW_MAX:
        text = f"an integer of {len(str(abs(value)))} digits"
    else:
        text = repr(value)
    text = " ".join(text.splitlines())
    return text if len(text) <= SHOW_MAX else text[: SHOW_MAX - 3] + "..."


def toml_key(name: str) -> str:
    """A TOML key as it would be written: bare when it can be, else quoted (one line)."""
    return name if _BARE_KEY.fullmatch(name) else show(name)


def fail(key: str, what: str, value: Any) -> ConfigError:
    return ConfigError(f"config: {key} must be {what}, got {show(value)}")


# -- the checks -------------------------------------------------------------------------


def _bounds(f: Field) -> Bounds:
    assert f.bounds is not None, f.key
    return f.bounds


def check_int(f: Field, value: Any) -> int:
    lo, hi, _ = _bounds(f)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise fail(f.key, f"an integer from {lo} to {hi}", value)
    return value


def check_float(f: Field, value: Any) -> float:
    lo, hi, lo_open = _bounds(f)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(f.key, "a number", value)
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float range: certainly out of bounds
        number = math.inf if value > 0 else -math.inf
    low_ok = number > lo if lo_open else number >= lo
    if not (math.isfinite(number) and low_ok and number <= hi):
        bound = f"greater than {lo:g}" if lo_open else f"at least {lo:g}"
        raise fail(f.key, f"a number {bound} and at most {hi:g}", value)
    return number


def check_choice(f: Field, value: Any) -> str:
    return choose(f.key, value, f.choices)


def choose(key_name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise fail(key_name, "one of " + ", ".join(choices), value)
    return value


def check_bool(f: Field, value: Any) -> bool:
    return is_bool(f.key, value)


def is_bool(key_name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(key_name, "true or false", value)
    return value


def check_str(f: Field, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail(f.key, "a non-empty string", value)
    return value


def _int_list(f: Field, value: Any, allow_empty: bool) -> tuple[int, ...]:
    lo, hi, _ = _bounds(f)
    what = f"a list of integers from {lo} to {hi}"
    if not isinstance(value, (list, tuple)) or (not value and not allow_empty):
        raise fail(f.key, what, value)
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not lo <= item <= hi:
            raise fail(f.key, what, value)
    return tuple(value)


def check_ints(f: Field, value: Any) -> tuple[int, ...]:
    """A list of integers, maybe empty (model.hidden: no hidden layer)."""
    return _int_list(f, value, allow_empty=True)


def check_some_ints(f: Field, value: Any) -> tuple[int, ...]:
    return _int_list(f, value, allow_empty=False)


def check_rates(f: Field, value: Any) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)):
        raise fail(f.key, "a list of learning rates", value)
    return tuple(check_float(f, v) for v in value)


def check_source(f: Field, value: Any) -> str:
    value = check_str(f, value)
    scheme, sep, rest = value.partition(":")
    if not sep or scheme not in f.choices or not rest:
        raise fail(f.key, "builtin:NAME, csv:PATH, npz:PATH or images:DIR (or parquet:PATH)", value)
    return value


TRACKING_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks")


def check_tracking_uri(f: Field, value: Any) -> str:
    """An MLflow tracking URI, or "" (none); checked for its form here, for an answer when the run starts."""
    if not isinstance(value, str):
        raise fail(f.key, "a tracking URI (a string)", value)
    value = value.strip()
    if value in ("", "databricks"):
        return value
    scheme, sep, rest = value.partition(":")
    scheme = scheme.split("+")[0].lower()  # postgresql+psycopg2://...
    if scheme == "file":  # said now, not as each run's mirror fails later
        raise fail(
            f.key,
            "a tracking URI other than a file store (MLflow 3 keeps file: in maintenance mode and the mirror "
            "fails on it); sqlite:///PATH/mlflow.db keeps the runs in one file",
            value,
        )
    ok = sep and scheme in TRACKING_SCHEMES and rest
    if ok and scheme in ("http", "https"):
        ok = rest.startswith("//") and len(rest.strip("/")) > 0
    if ok and scheme == "sqlite":
        ok = rest.startswith("///") and len(rest) > 3
    if not ok:
        raise fail(
            f.key, "an MLflow tracking URI (http://HOST:PORT, https://HOST, sqlite:///PATH, databricks, ...)", value
        )
    return value


def check_columns(f: Field, value: Any) -> tuple[tuple[str, str], ...]:
    """``{name = kind}`` (or (name, kind) pairs) of column kinds."""
    items = value.items() if isinstance(value, Mapping) else value
    if not isinstance(items, (list, tuple)) and not isinstance(value, Mapping):
        raise fail(f.key, "a table {column = kind}", value)
    out = []
    for pair in items:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise fail(f.key, "a table {column = kind}", value)
        name, kind = pair
        out.append((name, choose(f"{f.key}.{toml_key(name)}", kind, f.choices)))
    return tuple(out)


def check_strings(f: Field, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise fail(f.key, "a list of strings", value)
    return tuple(v.strip() for v in value)


def check_text_encoder(f: Field, value: Any) -> str:
    """A sentence encoder's hub name or folder, or "" (n-grams); whether it loads is checked when the data is."""
    if not isinstance(value, str):
        raise fail(f.key, "a sentence-transformers hub name or folder, or empty", value)
    return value.strip()


def check_model_kind(f: Field, value: Any) -> str:
    value = check_str(f, value)
    if value.startswith("custom:"):
        path, sep, func = value[len("custom:") :].rpartition(":")
        if not sep or not path or not func.isidentifier():
            raise fail(f.key, "custom:PATH.py:FUNCTION", value)
        return value
    if is_timm(value):
        name = timm_name(value)
        if not name or not all(c.isalnum() or c in "._-" for c in name):
            raise fail(f.key, "timm:ARCHITECTURE (a name timm knows, e.g. timm:resnet18.a1_in1k)", value)
        return value
    return choose(f.key, value, f.choices + ("custom:PATH.py:FUNCTION", "timm:ARCHITECTURE"))


def check_weights(f: Field, value: Any) -> str:
    """hub, none, or a path to a .safetensors or .pth file (its existence is checked when the model is built)."""
    value = check_str(f, value)
    if value in f.choices:
        return value
    if not value.lower().endswith(WEIGHTS_SUFFIXES):
        raise fail(f.key, "hub, none or the path of a " + " or ".join(WEIGHTS_SUFFIXES) + " file", value)
    return value


WEIGHTS_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")


def check_device(f: Field, value: Any) -> str:
    value = check_str(f, value)
    if value in f.choices:
        return value
    if value.startswith("cuda:") and value[5:].isdigit():
        return value
    raise fail(f.key, "cpu, cuda, cuda:N or mps", value)


def as_tuple(f: Field, value: Any) -> tuple[Any, ...]:
    """A value checked elsewhere (the search space, key by key: core.config.space), as a tuple."""
    return tuple(value)
