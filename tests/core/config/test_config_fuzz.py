"""Property tests: whatever TOML text arrives, the config layer answers with a Config or a
one-line ``ConfigError`` starting with ``config:``, never another exception.

Three kinds of input: random text; structured documents (random section and key
names mixed with the real ones, values of every TOML type: integers of any size,
floats including nan and inf, strings, booleans, arrays, nested tables, dates
and times); and structured documents with a few characters cut or inserted.
Derandomized, so a run is repeatable; about 10 s in all.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import fields
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.config import SECTIONS, Config, ConfigError, apply_overrides, parse_toml

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

REAL_KEYS = {name: [f.name for f in fields(cls)] for name, cls in SECTIONS.items()}
ALL_KEYS = sorted({k for keys in REAL_KEYS.values() for k in keys})
REAL_STRINGS = [
    "builtin:digits",
    "builtin:iris",
    "csv:x.csv",
    "images:dir",
    "npz:a.npz",
    "mlp",
    "cnn",
    "linear",
    "custom:m.py:make",
    "custom:m.py",
    "sgd",
    "adam",
    "adamw",
    "relu",
    "gelu",
    "single",
    "hogwild",
    "ddp",
    "sweep",
    "cpu",
    "cuda",
    "cuda:0",
    "mps",
    "label",
    "",
]


def check(text: str) -> Config | None:
    """The property: a Config, or a one-line ConfigError that starts with 'config:'."""
    try:
        cfg = parse_toml(text)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("config:"), message
        assert "\n" not in message and "\r" not in message, message
        assert len(message) < 1000, message
        return None
    assert isinstance(cfg, Config)
    assert parse_toml(cfg.to_toml()) == cfg  # what validates also round-trips
    return cfg


# ----------------------------------------------------------------------------- TOML writing


def toml_string(s: str) -> str:
    # JSON escapes are TOML escapes; TOML also wants DEL escaped.
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_string(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_document(top: dict[str, Any], sections: dict[str, dict[str, Any]]) -> str:
    lines = [f"{toml_string(k)} = {toml_value(v)}" for k, v in top.items()]
    for name, body in sections.items():
        lines.append(f"[{toml_string(name)}]")
        lines += [f"{toml_string(k)} = {toml_value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- strategies

names = st.one_of(
    st.sampled_from(list(SECTIONS) + ALL_KEYS),
    st.text(min_size=1, max_size=12),
    st.sampled_from(["a\nb", "x y", "é", "\t", "[", "]", "=", '"', "data.source"]),
)
ints = st.one_of(
    st.integers(-5, 300),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1, 256, 257, 1024, 1025, 1 << 20, (1 << 20) + 1, 2**31 - 1, 2**31, 10**30, 10**400]),
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.9, 0.90001, 0.95, 0.999, 1.0, 100.0, 100.5, 1e-300, 5e-324, 1e308]),
)
strings = st.one_of(st.sampled_from(REAL_STRINGS), st.text(max_size=30))
dates = st.one_of(
    st.datetimes(timezones=st.none() | st.just(dt.timezone.utc) | st.just(dt.timezone(dt.timedelta(hours=-5)))),
    st.dates(),
    st.times(),
)
scalars = st.one_of(ints, floats, strings, st.booleans(), dates)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(names, inner, max_size=4),
    ),
    max_leaves=12,
)


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A valid TOML document: mostly real sections and keys, some strangers, any values."""
    sections: dict[str, dict[str, Any]] = {}
    for _ in range(draw(st.integers(0, 6))):
        real = draw(st.booleans()) or draw(st.booleans())
        section = draw(st.sampled_from(list(SECTIONS))) if real else draw(names)
        body = sections.setdefault(section, {})
        for _ in range(draw(st.integers(0, 5))):
            if section in REAL_KEYS and draw(st.integers(0, 3)):
                key = draw(st.sampled_from(REAL_KEYS[section]))
            else:
                key = draw(names)
            body[key] = draw(values)
    top: dict[str, Any] = {}
    if draw(st.integers(0, 7)) == 0:  # a top-level key: a section written as a value, or a stranger
        top[draw(names)] = draw(values)
    top = {k: v for k, v in top.items() if k not in sections}
    return toml_document(top, sections)


@st.composite
def mutated_documents(draw: st.DrawFn) -> str:
    text = draw(documents())
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        if draw(st.booleans()):
            text = text[:i] + text[i + draw(st.integers(1, 5)) :]
        else:
            text = (
                text[:i]
                + draw(st.sampled_from(["[", "]", "=", '"', "'", "\n", "{", ",", "\\", "#", "\x00", "9" * 30]))
                + text[i:]
            )
    return text


# ----------------------------------------------------------------------------- properties


@FUZZ
@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    check(text)


@FUZZ
@given(documents())
def test_structured_documents(text: str) -> None:
    check(text)


@FUZZ
@given(mutated_documents())
def test_mutated_documents(text: str) -> None:
    check(text)


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.builds(
                lambda s, k, v: f"{s}.{k}={v}",
                st.sampled_from(list(SECTIONS)),
                st.sampled_from(ALL_KEYS),
                st.one_of(values.map(toml_value), st.text(max_size=20)),
            ),
            st.text(max_size=40),
        ),
        max_size=4,
    )
)
def test_set_overrides(items: list[str]) -> None:
    """``--set`` values take the same path: a Config or a one-line ConfigError."""
    try:
        apply_overrides(Config(), items)
    except ConfigError as exc:
        assert str(exc).startswith("config:") and "\n" not in str(exc), str(exc)


def test_found_by_fuzzing() -> None:
    """Inputs that once escaped as other exceptions or as multi-line messages."""
    for text in [
        '[data]\n"col\\nour" = 1',  # key with a newline: message was two lines
        '["a\\nb"]\nx = 1',  # section name with a newline
        "[optim]\nlr = 1" + "0" * 400,  # OverflowError converting to float
        "[train]\nseed = " + "9" * 5000,  # ValueError: more than 4300 digits
        "[model]\nhidden = " + "[" * 2000 + "]" * 2000,  # RecursionError in tomllib
        "[model]\nhidden = " + "{a = " * 2000 + "1" + "}" * 2000,
        "[train]\nseed = 1979-05-27T07:32:00Z",
        "[data]\nsource = " + toml_string("x" * 10000),
    ]:
        assert check(text) is None
    for item in ["optim.lr=" + "9" * 5000, "model.hidden=" + "[" * 2000, "data.target=a\nb", "x\ny.z=1"]:
        try:
            apply_overrides(Config(), [item])
        except ConfigError as exc:
            assert "\n" not in str(exc)
