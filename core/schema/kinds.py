"""What each feature column is (``number``, ``category``, ``bool``, ``datetime``, ``text`` or ``ignore``, with a
reason), from its values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import DataError
from core.schema.cells import FALSE_WORDS, TRUE_WORDS, distinct_texts, missing_mask, parse_numbers
from core.schema.coded import Coded, Column
from core.schema.dates import ORDERS, choose_order, looks_like_dates, parse_dates
from core.schema.table import RawTable
from core.schema.text import several_words

KINDS = ("number", "category", "bool", "datetime", "text", "ignore")
DATE_KINDS = ("datetime", "datetime:dmy", "datetime:mdy")  # data.columns may name a date column's order
MIN_ROWS_FOR_TEXT_RULES = 20  # below this, a column is never ignored as an id or as free text


def max_levels(n_rows: int) -> int:
    """The most levels a category column of ``n_rows`` rows may have: half the rows, and never under 20."""
    return max(MIN_ROWS_FOR_TEXT_RULES, n_rows // 2)


@dataclass(frozen=True)
class Inferred:
    kind: str
    reason: str = ""  # why: "ignored: ...", or "set in data.columns"
    missing: int = 0
    levels: int = 0  # distinct values (categories)
    order: str = ""  # datetime: iso | dmy | mdy


ID_NAMES = frozenset({"id", "index", "row", "rowid", "row_id", "key", "uuid"})


def _id_name(name: str) -> bool:
    low = name.strip().lower()
    return low in ID_NAMES or low.endswith(("_id", " id")) or (low.endswith("id") and name[-2:] == "Id")


def _is_id_numbers(x: np.ndarray, n: int, name: str) -> bool:
    """An integer column named like an id with a distinct value in every row (numbers with other names stay)."""
    if not _id_name(name) or n < MIN_ROWS_FOR_TEXT_RULES or np.isnan(x).any() or not np.all(np.mod(x, 1) == 0):
        return False
    s = np.sort(x)
    return len(np.unique(s)) == n


def infer_kind(name: str, values: Column, override: str | None = None, where: str = "data") -> Inferred:
    """The kind of one feature column from its values (override: ``data.columns``)."""
    n = len(values)
    miss = missing_mask(values)
    n_missing = int(np.count_nonzero(miss))
    if override == "ignore":
        return Inferred("ignore", "set in data.columns", n_missing)
    if override in DATE_KINDS or override == "text":
        return _chosen_wide(name, values, miss, override, where)
    if override is not None:
        levels = len(distinct_texts(values[~miss])) if override == "category" else 0
        return Inferred(override, "set in data.columns", n_missing, levels)
    if n_missing == n:
        return Inferred("number", "", n_missing)  # all missing: fit_schema refuses it, naming the column
    if not isinstance(values, Coded) and values.dtype != object:  # a Coded column is text
        if _id_name(name) and _is_id_numbers(values[~miss] if n_missing else values, n, name):
            return Inferred("ignore", "an id: a distinct integer in every row", n_missing)
        return Inferred("number", "", n_missing)
    present = values[~miss] if n_missing else values
    numbers, bad = parse_numbers(present)
    if bad == 0 or bad * 2 <= len(present):  # mostly numbers: a stray word is an error, not a category
        if bad == 0 and _is_id_numbers(numbers, n, name):
            return Inferred("ignore", "an id: a distinct integer in every row", n_missing)
        return Inferred("number", "", n_missing)
    texts = distinct_texts(present)
    words = {v.lower() for v in texts}
    if words <= (TRUE_WORDS | FALSE_WORDS) and len(words) <= 2:
        return Inferred("bool", "", n_missing)
    distinct = len(texts)
    if n >= MIN_ROWS_FOR_TEXT_RULES and looks_like_dates(sorted(texts)):
        order = choose_order(name, sorted(texts), where)
        return Inferred("datetime", _not_dates(present, order), n_missing, distinct, order)
    if n >= MIN_ROWS_FOR_TEXT_RULES and distinct > max_levels(n) and several_words(sorted(texts)):
        return Inferred("text", "", n_missing, distinct)
    if n >= MIN_ROWS_FOR_TEXT_RULES and distinct == n:
        return Inferred("ignore", "an id: a distinct value in every row", n_missing, distinct)
    if n >= MIN_ROWS_FOR_TEXT_RULES and distinct > max_levels(n):
        return Inferred("ignore", f"free text: {distinct} distinct values in {n} rows", n_missing, distinct)
    return Inferred("category", "", n_missing, distinct)


def _chosen_wide(name: str, values: Column, miss: np.ndarray, override: str, where: str) -> Inferred:
    """A column set to ``text`` or ``datetime[:ORDER]`` in data.columns, checked against its cells."""
    n_missing = int(np.count_nonzero(miss))
    present = values[~miss] if n_missing else values
    if isinstance(present, np.ndarray) and present.dtype != object:
        raise DataError(
            f"{where}: column {name!r} is set to {override!r} in data.columns but holds only numbers; "
            f'set it to "number" or "category"'
        )
    texts = sorted(distinct_texts(present))
    if override == "text":
        if texts and parse_numbers(np.asarray(texts, dtype=object))[1] == 0:
            raise DataError(
                f'{where}: column {name!r} is set to "text" in data.columns but holds only numbers '
                f'(e.g. {texts[0]!r}); set it to "number" or "category"'
            )
        return Inferred("text", "set in data.columns", n_missing, len(texts))
    order = override.partition(":")[2] or choose_order(name, texts, where)
    if order not in ORDERS:
        raise DataError(f"{where}: data.columns sets {name!r} to {override!r}; a date order is dmy or mdy")
    seconds, bad = parse_dates(np.asarray(texts, dtype=object), order)
    if texts and bad == len(texts):
        raise DataError(
            f"{where}: column {name!r} is set to {override!r} in data.columns but no cell is such a date "
            f"(e.g. {texts[0]!r})"
        )
    note = _not_dates(present, order)
    return Inferred("datetime", "set in data.columns" + (f"; {note}" if note else ""), n_missing, len(texts), order)


def _not_dates(present: Column, order: str) -> str:
    """How many present cells of a date column are not dates (taken as missing), as a note, or ""."""
    bad = parse_dates(present, order)[1]
    return f"{bad} cell(s) not dates of this form, taken as missing" if bad else ""


def infer_kinds(table: RawTable, target: str, overrides: Mapping[str, str] | None = None) -> dict[str, Inferred]:
    """Every feature column's kind (the target excluded); an override naming no column is an error."""
    overrides = dict(overrides or {})
    unknown = [c for c in overrides if c not in table.columns]
    if unknown:
        raise DataError(
            f"{table.where}: data.columns names {unknown[0]!r}, which {table.path} does not have; "
            "columns: " + ", ".join(table.names[:20])
        )
    if target in overrides:
        raise DataError(
            f"{table.where}: data.columns sets the kind of the target column {target!r}; "
            "the target's kind is train.task"
        )
    return {
        name: infer_kind(name, values, overrides.get(name), table.where)
        for name, values in table.columns.items()
        if name != target
    }


DATE_FORMS = {"iso": "year first", "dmy": "day first", "mdy": "month first"}


def column_detail(col: Mapping[str, Any], encoder: str = "", tuned: bool = False) -> str:
    """What a date or free-text column becomes, in a few words (a column's JSON, listed or fitted); ``encoder``:
    the sentence encoder ``model.text_encoder`` names for a listed column (``tuned``: fine-tuned first), a
    fitted one names its own."""
    if col.get("kind") == "datetime":
        form = DATE_FORMS.get(str(col.get("order") or "iso"), "year first")
        return f"dates, {form}: year, month, weekday, hour, minute, days since the first"
    fitted = col.get("encoder")
    if col.get("kind") == "text" and (encoder or isinstance(fitted, Mapping)):
        name = str(fitted.get("name", "")) if isinstance(fitted, Mapping) else encoder
        how = "fine-tuned" if (isinstance(fitted, Mapping) and fitted.get("relative")) or tuned else "frozen"
        dim = f", {fitted['dim']} numbers" if isinstance(fitted, Mapping) and fitted.get("dim") else ""
        return f"free text, sentence encoder: embedded by {name} ({how}{dim})"
    if col.get("kind") == "text":
        slots = col.get("slots") or {}
        if slots:
            return f"free text: {slots.get('words', 0)} word and {slots.get('chars', 0)} character n-grams a row"
        distinct = f", {col['distinct']} distinct" if col.get("distinct") else ""
        return f"free text{distinct}: word and character n-grams"
    return ""


def describe_kinds(kinds: Mapping[str, Inferred]) -> Iterable[str]:
    """Lines for the log: each column ignored by inference and why, and each one learned from as dates or free
    text."""
    for name, inf in kinds.items():
        if inf.kind == "ignore" and inf.reason != "set in data.columns":
            yield f"column {name!r} ignored: {inf.reason}"
        elif inf.kind == "datetime":
            form = DATE_FORMS[inf.order]
            yield (
                f"column {name!r} read as dates ({form}): year, month, weekday, hour, minute and days since the "
                "first" + (f"; {inf.reason}" if inf.reason else "")
            )
        elif inf.kind == "text":
            yield f"column {name!r} read as free text ({inf.levels} distinct): hashed word and character n-grams"
