"""The column schema of a table: inferred once, fitted on the training split, carried by every export.

A :class:`RawTable` holds a CSV's or Parquet file's columns as read (text as
``str`` with ``None`` for a missing cell, numbers as float64 with NaN for a
missing one). :func:`infer_kinds` says what each column is (``number``,
``category``, ``bool`` or ``ignore``, with a reason); :func:`fit_schema` fits
fill values (medians), missing indicators and category levels on the training
rows; :func:`encode_columns` (and :func:`encode_rows` for a list of row
mappings, as a server receives them) turns raw columns in any order into the
model's input. The encoded row is

    [number and bool columns (missing filled with the median), missing
     indicators (1 where the cell was missing), category indices]

as float32; category index 0 is the reserved "missing" level, 1 "unseen",
2.. the training levels. The model standardises the numeric part with the
statistics the schema also holds (``mean``/``std``, identity for
indicators and categories) and looks the categories up in embeddings
(:mod:`core.models`). The schema is plain JSON (:meth:`Schema.to_json`),
stored in the checkpoint and ``model.json``.

Torch-free: prediction and serving import this without the training stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from core.errors import DataError

KINDS = ("number", "category", "bool", "ignore")
DEFAULT_MISSING = ("", "NA", "NaN", "null", "?")
TRUE_WORDS = frozenset({"true", "yes", "t", "y"})
FALSE_WORDS = frozenset({"false", "no", "f", "n"})
MISSING_LEVEL, UNSEEN_LEVEL = "<missing>", "<unseen>"
RESERVED_LEVELS = 2            # index 0: missing, 1: unseen
MIN_ROWS_FOR_TEXT_RULES = 20   # below this, a column is never ignored as an id or as free text
REGRESSION_MIN_LEVELS = 20     # task "auto": an integer target with more distinct values than this is a number
IMBALANCE_RATIO = 5.0          # the data summary warns when the largest class is this many times the smallest
SCHEMA_VERSION = 1


def max_levels(n_rows: int) -> int:
    """The most levels a category column of ``n_rows`` rows may have: half the rows, and never under 20."""
    return max(MIN_ROWS_FOR_TEXT_RULES, n_rows // 2)


def embedding_size(cardinality: int) -> int:
    """fastai's rule of thumb for an embedding's width: min(600, round(1.6 * n ** 0.56))."""
    return int(min(600, round(1.6 * cardinality ** 0.56)))


# ----------------------------------------------------------------------------- raw tables


@dataclass
class RawTable:
    """A table's columns as read: object arrays of ``str``/``None`` or float64 arrays with NaN for missing."""

    where: str                       # "data: csv:PATH" or "predict": the start of every error
    path: str
    columns: dict[str, np.ndarray]   # in file order
    n_rows: int
    kind: str = ""                   # "csv" or "parquet": where it came from

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def take(self, rows: np.ndarray) -> "RawTable":
        return RawTable(self.where, self.path, {k: v[rows] for k, v in self.columns.items()}, int(len(rows)), self.kind)


def _as_text(values: np.ndarray, missing: frozenset[str]) -> np.ndarray:
    out = np.asarray(values, dtype=object)
    if missing:
        is_missing = np.fromiter((v is None or v in missing for v in out), dtype=bool, count=len(out))
        out = out.copy()
        out[is_missing] = None
    return out


def read_table(path: Path, scheme: str, where: str, missing: Sequence[str] = DEFAULT_MISSING) -> RawTable:
    """Read every column of a CSV (``scheme`` "csv") or Parquet file; raise :class:`DataError`."""
    path = Path(path).expanduser()
    miss = frozenset(missing)
    if scheme == "parquet":
        return _read_parquet(path, where, miss)
    fast = _read_csv_fast(path, where, miss)
    if fast is not None:
        return fast
    from core.readers import Columns, read_csv

    csv = read_csv(path, where, lambda header: Columns(numeric=[], text=list(range(len(header)))))
    if len(set(csv.header)) != len(csv.header):
        dup = next(h for h in csv.header if csv.header.count(h) > 1)
        raise DataError(f"{where}: {path} names column {dup!r} twice")
    columns = {}
    n = 0
    for i, name in enumerate(csv.header):
        text = csv.text[i]
        n = len(text.codes)
        numbers = _numeric_levels(text.values, miss)
        if numbers is not None:  # every present value a finite number: parsed once per distinct value, in C
            columns[name] = numbers[text.codes] if n else np.empty(0)
            continue
        levels = np.asarray([None if v in miss else v for v in text.values] + [None], dtype=object)
        columns[name] = levels[text.codes] if n else np.empty(0, dtype=object)
    return RawTable(where, str(path), columns, n, "csv")


def _read_csv_fast(path: Path, where: str, missing: frozenset[str]) -> RawTable | None:
    """pyarrow's reader with type inference; None when the file needs the line-precise text reader (to
    accept it, or to say what is wrong): malformed, no rows, names twice, or a number that is not finite."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    from core.readers import READ_BLOCK_BYTES, _has_quotes, check_stop

    if not path.is_file():
        return None
    parse = pacsv.ParseOptions(newlines_in_values=_has_quotes(path))
    convert = pacsv.ConvertOptions(null_values=sorted(missing), strings_can_be_null=True,
                                   quoted_strings_can_be_null=True)
    try:  # by blocks, asking between them whether to stop (a Ctrl-C or Stop while a large file loads)
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=READ_BLOCK_BYTES),
                                parse_options=parse, convert_options=convert)
        batches = []
        for batch in reader:
            check_stop()
            batches.append(batch)
        table = pa.Table.from_batches(batches, schema=reader.schema)
    except (pa.ArrowException, OSError, ValueError):
        check_stop()
        try:  # a later block's values the first block's types did not foresee: the whole file, typed at once
            table = pacsv.read_csv(path, parse_options=parse, convert_options=convert)
        except (pa.ArrowException, OSError, ValueError):
            return None
    names = [str(n).strip() for n in table.column_names]
    if table.num_rows == 0 or len(set(names)) != len(names):
        return None
    f32 = float(np.finfo(np.float32).max)
    columns: dict[str, np.ndarray] = {}
    for name, col in zip(names, table.columns):
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            values = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
            present = values[~np.isnan(values)] if col.null_count else values
            if np.isnan(present).any() or not (np.abs(present) <= f32).all():
                return None  # "nan", "inf" or beyond float32 written in a cell: the text reader names it
            if col.null_count:
                values = np.where(pc.is_null(col).to_numpy(zero_copy_only=False), np.nan, values)
            columns[name] = values
        elif pa.types.is_boolean(t):
            columns[name] = np.asarray([None if v is None else ("true" if v else "false") for v in col.to_pylist()],
                                       dtype=object)
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
            trimmed = pc.utf8_trim_whitespace(col.cast(pa.string()))
            if missing:
                trimmed = pc.if_else(pc.is_in(trimmed, value_set=pa.array(sorted(missing))), None, trimmed)
            columns[name] = np.asarray(trimmed.to_numpy(zero_copy_only=False), dtype=object)
        else:  # dates, times: their text, as the file has it
            return None
    return RawTable(where, str(path), columns, int(table.num_rows), "csv")


def _numeric_levels(values: list[str], missing: frozenset[str]) -> np.ndarray | None:
    """A column's distinct texts as float64 (NaN for the missing ones) when every other one is a finite
    float32 number; None otherwise (the column stays text: inference and errors look at its cells)."""
    present = [v for v in values if v not in missing]
    try:
        parsed = np.asarray(present, dtype=np.float64)
    except ValueError:
        return None
    if not np.all(np.abs(parsed) <= float(np.finfo(np.float32).max)):  # NaN, infinite or beyond float32
        return None
    out = np.full(len(values), np.nan)
    keep = np.fromiter((v not in missing for v in values), dtype=bool, count=len(values))
    out[keep] = parsed
    return out


def _read_parquet(path: Path, where: str, missing: frozenset[str]) -> RawTable:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DataError(f"{where}: file not found: {path}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as exc:
        why = " ".join(str(exc).split())[:120]
        raise DataError(f"{where}: {path} is not a readable Parquet file ({why})") from None
    if table.num_rows == 0:
        raise DataError(f"{where}: {path} has no data rows")
    columns: dict[str, np.ndarray] = {}
    for name in table.column_names:
        col = table.column(name)
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
            columns[str(name)] = np.asarray(col.cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
        elif pa.types.is_boolean(t):
            columns[str(name)] = np.asarray([None if v is None else ("true" if v else "false")
                                             for v in col.to_pylist()], dtype=object)
        else:
            values = [None if v is None else str(v).strip() for v in col.to_pylist()]
            columns[str(name)] = _as_text(np.asarray(values, dtype=object), missing)
    return RawTable(where, str(path), columns, int(table.num_rows), "parquet")


# ----------------------------------------------------------------------------- kinds


@dataclass(frozen=True)
class Inferred:
    kind: str
    reason: str = ""     # why: "ignored: ...", or "set in data.columns"
    missing: int = 0
    levels: int = 0      # distinct values (categories)


def _missing_mask(values: np.ndarray) -> np.ndarray:
    if values.dtype == object:
        return np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    return np.isnan(values)


def _parse_numbers(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Text cells as float64 (NaN where missing) and how many non-missing cells are not numbers."""
    if values.dtype != object:
        return values, 0
    out = np.full(len(values), np.nan)
    bad = 0
    for k, v in enumerate(values):
        if v is None:
            continue
        try:
            out[k] = float(v)
        except ValueError:
            bad += 1
    return out, bad


def _first_bad_number(values: np.ndarray) -> int | None:
    for k, v in enumerate(values):
        if v is None:
            continue
        try:
            x = float(v)
        except ValueError:
            return k
        if not math.isfinite(x) or abs(x) > float(np.finfo(np.float32).max):
            return k
    return None


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


def infer_kind(name: str, values: np.ndarray, override: str | None = None) -> Inferred:
    """The kind of one feature column from its values (override: ``data.columns``)."""
    n = len(values)
    miss = _missing_mask(values)
    n_missing = int(miss.sum())
    present = values[~miss]
    if override == "ignore":
        return Inferred("ignore", "set in data.columns", n_missing)
    if override is not None:
        levels = len({_category_text(v) for v in present}) if override == "category" else 0
        return Inferred(override, "set in data.columns", n_missing, levels)
    if len(present) == 0:
        return Inferred("number", "", n_missing)  # all missing: fit_schema refuses it, naming the column
    if values.dtype != object:
        if _is_id_numbers(present, n, name):
            return Inferred("ignore", "an id: a distinct integer in every row", n_missing)
        return Inferred("number", "", n_missing)
    numbers, bad = _parse_numbers(present)
    if bad == 0 or bad * 2 <= len(present):  # mostly numbers: a stray word is an error, not a category
        if bad == 0 and _is_id_numbers(numbers, n, name):
            return Inferred("ignore", "an id: a distinct integer in every row", n_missing)
        return Inferred("number", "", n_missing)
    words = {str(v).lower() for v in present}
    if words <= (TRUE_WORDS | FALSE_WORDS) and len(words) <= 2:
        return Inferred("bool", "", n_missing)
    distinct = len(set(present.tolist()))
    if n >= MIN_ROWS_FOR_TEXT_RULES and distinct == n:
        return Inferred("ignore", "an id: a distinct value in every row", n_missing, distinct)
    if n >= MIN_ROWS_FOR_TEXT_RULES and distinct > max_levels(n):
        return Inferred("ignore", f"free text: {distinct} distinct values in {n} rows", n_missing, distinct)
    return Inferred("category", "", n_missing, distinct)


def infer_kinds(table: RawTable, target: str, overrides: Mapping[str, str] | None = None) -> dict[str, Inferred]:
    """Every feature column's kind (the target excluded); an override naming no column is an error."""
    overrides = dict(overrides or {})
    unknown = [c for c in overrides if c not in table.columns]
    if unknown:
        raise DataError(f"{table.where}: data.columns names {unknown[0]!r}, which {table.path} does not have; "
                        "columns: " + ", ".join(table.names[:20]))
    if target in overrides:
        raise DataError(f"{table.where}: data.columns sets the kind of the target column {target!r}; "
                        "the target's kind is train.task")
    return {name: infer_kind(name, values, overrides.get(name))
            for name, values in table.columns.items() if name != target}


# ----------------------------------------------------------------------------- the target


def _category_text(v: Any) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    return str(v)


def target_values(table: RawTable, target: str) -> tuple[np.ndarray, np.ndarray]:
    """The target column and the mask of rows where it is present."""
    if target not in table.columns:
        names = table.names
        raise DataError(f"{table.where}: target column {target!r} not found in {table.path}; columns: "
                        + ", ".join(names[:20]) + (" ..." if len(names) > 20 else "") + " (set data.target)")
    values = table.columns[target]
    return values, ~_missing_mask(values)


def choose_task(values: np.ndarray, task: str) -> tuple[str, str]:
    """("classification" | "regression", why) for a target's present values and ``train.task``."""
    numbers, bad = _parse_numbers(values)
    numeric = bad == 0 and len(values) > 0 and bool(np.isfinite(numbers).all())
    if task == "regression":
        return "regression", "set by train.task"
    if task == "classification":
        return "classification", "set by train.task"
    if not numeric:
        return "classification", "the target holds text"
    if not np.all(np.mod(numbers, 1) == 0):
        return "regression", "the target holds fractional numbers"
    distinct = len(np.unique(numbers))
    if distinct > REGRESSION_MIN_LEVELS:
        return "regression", f"the target holds {distinct} distinct integers"
    return "classification", f"the target holds {distinct} distinct integers"


def class_names(values: np.ndarray) -> list[str]:
    """Class names sorted (numerically when they are all numbers)."""
    uniq = sorted({_category_text(v) for v in values})
    try:
        uniq = sorted(uniq, key=float)
    except ValueError:
        pass
    return uniq


def class_codes(values: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Class names (as :func:`class_names` sorts them) and each row's class index, without a loop per row."""
    if values.dtype != object:
        uniq, inverse = np.unique(values, return_inverse=True)  # numbers: sorted numerically already
        return [_category_text(float(u)) for u in uniq], inverse.reshape(-1).astype(np.int64)
    texts = np.asarray([_category_text(v) for v in values], dtype=str) if len(values) else np.empty(0, str)
    uniq, inverse = np.unique(texts, return_inverse=True)
    names = [str(u) for u in uniq]
    order = sorted(range(len(names)), key=lambda i: names[i])
    try:
        order = sorted(order, key=lambda i: float(names[i]))
    except ValueError:
        pass
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    return [names[i] for i in order], rank[inverse.reshape(-1)]


def regression_target(table: RawTable, target: str, values: np.ndarray) -> np.ndarray:
    numbers, bad = _parse_numbers(values)
    if bad or not np.isfinite(numbers).all():
        k = _first_bad_number(values) if values.dtype == object else int(np.flatnonzero(~np.isfinite(numbers))[0])
        cell = values[k] if k is not None else "?"
        raise DataError(f"{table.where}: {table.path} target column {target!r} is not a number in row "
                        f"{(k or 0) + 1} ({str(cell)[:40]!r}); regression needs numbers (or set train.task)")
    return numbers


# ----------------------------------------------------------------------------- the schema


@dataclass
class ColumnSpec:
    name: str
    kind: str                    # number | category | bool | ignore
    reason: str = ""
    fill: float = 0.0            # number, bool: the training median
    indicator: bool = False      # number, bool: a missing-indicator feature follows
    mean: float = 0.0            # standardisation of the filled value
    std: float = 1.0
    levels: list[str] = field(default_factory=list)  # category: training levels (index 2..)
    missing: int = 0             # missing cells seen when fitting

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.reason:
            out["reason"] = self.reason
        if self.kind in ("number", "bool"):
            out.update(fill=self.fill, indicator=self.indicator, mean=self.mean, std=self.std)
        if self.kind == "category":
            out["levels"] = list(self.levels)
            out["reserved"] = [MISSING_LEVEL, UNSEEN_LEVEL]
        out["missing"] = self.missing
        return out

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "ColumnSpec":
        return ColumnSpec(str(d["name"]), str(d["kind"]), str(d.get("reason", "")), float(d.get("fill", 0.0)),
                          bool(d.get("indicator", False)), float(d.get("mean", 0.0)), float(d.get("std", 1.0)),
                          [str(v) for v in d.get("levels", [])], int(d.get("missing", 0)))


@dataclass
class Schema:
    columns: list[ColumnSpec]
    target: str
    task: str                                  # classification | regression
    classes: list[str] = field(default_factory=list)
    target_mean: float = 0.0                   # regression: the model learns (y - mean) / std
    target_std: float = 1.0
    missing_values: list[str] = field(default_factory=lambda: list(DEFAULT_MISSING))

    # -- layout -----------------------------------------------------------------
    @property
    def used(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.kind != "ignore"]

    @property
    def numeric(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.kind in ("number", "bool")]

    @property
    def categorical(self) -> list[ColumnSpec]:
        return [c for c in self.columns if c.kind == "category"]

    @property
    def cardinalities(self) -> list[int]:
        return [len(c.levels) + RESERVED_LEVELS for c in self.categorical]

    @property
    def feature_names(self) -> list[str]:
        """The encoded row's features, in order."""
        return ([c.name for c in self.numeric] + [f"{c.name}_missing" for c in self.numeric if c.indicator]
                + [c.name for c in self.categorical])

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    def stats(self) -> tuple[list[float], list[float]]:
        """Per encoded feature: (mean, std) the model standardises with (identity past the numbers)."""
        n_rest = sum(c.indicator for c in self.numeric) + len(self.categorical)
        return ([c.mean for c in self.numeric] + [0.0] * n_rest, [c.std for c in self.numeric] + [1.0] * n_rest)

    # -- JSON -------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        target: dict[str, Any] = {"name": self.target, "kind": "classes" if self.task == "classification" else "number"}
        if self.task == "classification":
            target["classes"] = list(self.classes)
        else:
            target.update(mean=self.target_mean, std=self.target_std,
                          formula="prediction = output * std + mean")
        return {"version": SCHEMA_VERSION, "task": self.task, "target": target,
                "columns": [c.to_json() for c in self.columns], "missing_values": list(self.missing_values),
                "encoded": {"features": self.feature_names, "categories": self.cardinalities,
                            "layout": "numbers (filled), missing indicators, category indices "
                                      "(0 missing, 1 unseen, 2.. levels)"}}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "Schema":
        t = d["target"]
        return Schema([ColumnSpec.from_json(c) for c in d["columns"]], str(t["name"]), str(d["task"]),
                      [str(c) for c in t.get("classes", [])], float(t.get("mean", 0.0)), float(t.get("std", 1.0)),
                      [str(v) for v in d.get("missing_values", DEFAULT_MISSING)])

    # -- the target -------------------------------------------------------------
    def encode_target(self, values: np.ndarray, where: str) -> np.ndarray:
        if self.task == "regression":
            numbers, _ = _parse_numbers(values)
            return ((numbers - self.target_mean) / self.target_std).astype(np.float32)
        index = {c: i for i, c in enumerate(self.classes)}
        return np.asarray([index[_category_text(v)] for v in values], dtype=np.int64)

    def decode_output(self, out: np.ndarray) -> np.ndarray:
        """Regression: the model's outputs in the target's units."""
        return out * self.target_std + self.target_mean


def fit_schema(table: RawTable, target: str, kinds: Mapping[str, Inferred], task: str, classes: Sequence[str],
               y_train: np.ndarray | None, train_rows: np.ndarray, standardize: bool = True,
               missing_values: Sequence[str] = DEFAULT_MISSING) -> Schema:
    """Fit fill values, indicators, levels and statistics on ``train_rows`` of ``table``."""
    where, path = table.where, table.path
    specs: list[ColumnSpec] = []
    n_train = len(train_rows)
    for name, inf in kinds.items():
        values = table.columns[name]
        if inf.kind == "ignore":
            specs.append(ColumnSpec(name, "ignore", inf.reason, missing=inf.missing))
            continue
        if inf.missing == len(values):
            raise DataError(f"{where}: {path} column {name!r} is all missing (every cell empty or one of "
                            f"{', '.join(repr(m) for m in missing_values)}); drop it or set "
                            f'data.columns = {{{name} = "ignore"}}')
        train = values[train_rows]
        if inf.kind == "category":
            present = [_category_text(v) for v in train if v is not None and not (isinstance(v, float) and math.isnan(v))]
            levels = sorted(set(present))
            if len(levels) > max_levels(n_train) and len(levels) > max_levels(len(values)) // 2:
                raise DataError(f"{where}: {path} category column {name!r} has {len(levels)} levels in "
                                f"{n_train} training rows, more than {max_levels(n_train)} can be learned; "
                                f'set data.columns = {{{name} = "ignore"}}')
            specs.append(ColumnSpec(name, "category", inf.reason, levels=levels, missing=int(n_train - len(present))))
            continue
        x = _numbers_of(table, name, values, inf.kind)[train_rows].astype(np.float32)  # as the model gets them
        miss = np.isnan(x)
        present = x[~miss] if miss.any() else x
        fill = float(np.median(present)) if len(present) else 0.0
        filled = np.where(miss, np.float32(fill), x) if miss.any() else x
        mean, std = (float(filled.mean(dtype=np.float64)), float(filled.std(dtype=np.float64))) \
            if standardize else (0.0, 1.0)
        if std < 1e-6:
            std = 1.0
        specs.append(ColumnSpec(name, inf.kind, inf.reason, fill=fill, indicator=bool(miss.any()),
                                mean=mean, std=std, missing=int(miss.sum())))
    if not any(s.kind != "ignore" for s in specs):
        ignored = "; ".join(f"{s.name}: {s.reason}" for s in specs if s.kind == "ignore")
        raise DataError(f"{where}: {path} has no usable feature column besides {target!r}"
                        + (f" (ignored: {ignored})" if ignored else ""))
    schema = Schema(specs, target, task, list(classes), missing_values=list(missing_values))
    if task == "regression" and y_train is not None:
        schema.target_mean = float(np.mean(y_train))
        std = float(np.std(y_train))
        schema.target_std = std if std > 1e-12 else 1.0
    return schema


def _numbers_of(table: RawTable | None, name: str, values: np.ndarray, kind: str, where: str = "",
                path: str = "", row0: int = 0) -> np.ndarray:
    """A number or bool column as float64 with NaN for missing; a value of the wrong kind names column and row."""
    where = table.where if table is not None else where
    path = table.path if table is not None else path
    if kind == "bool":
        if values.dtype != object:
            return np.asarray(values, dtype=np.float64)
        out = np.full(len(values), np.nan)
        for k, v in enumerate(values):
            if v is None:
                continue
            w = str(v).lower()
            if w in TRUE_WORDS or w == "1":
                out[k] = 1.0
            elif w in FALSE_WORDS or w == "0":
                out[k] = 0.0
            else:
                raise DataError(f"{where}: {path} column {name!r} row {row0 + k + 1} holds {str(v)[:40]!r}, "
                                "not true/false")
        return out
    if values.dtype != object:
        return np.asarray(values, dtype=np.float64)
    numbers, bad = _parse_numbers(values)
    present = ~_missing_mask(values)
    nonfinite = present & ~np.isfinite(numbers)
    big = np.abs(np.nan_to_num(numbers, posinf=0.0, neginf=0.0)) > float(np.finfo(np.float32).max)
    if bad or nonfinite.any() or big.any():
        if table is not None and table.kind == "csv" and present.all():
            from core.readers import Columns, read_csv  # the line-precise reader's message names the line

            i = table.names.index(name)
            read_csv(Path(path), where, lambda header: Columns(numeric=[i]))
        k = _first_bad_number(values)
        assert k is not None
        cell = str(values[k]).strip()[:40]
        try:
            x = float(cell)
            what = "has a non-finite value" if not math.isfinite(x) else "has a value too large for float32"
        except ValueError:
            what = "is not numeric"
        hint = f'; set data.columns = {{{name} = "category"}} to treat it as text' if what == "is not numeric" else ""
        raise DataError(f"{where}: {path} column {name!r} {what} (row {row0 + k + 1}: {cell!r}){hint}")
    return numbers


# ----------------------------------------------------------------------------- encoding


@dataclass
class Encoded:
    """The model's input for some rows, and what encoding them met."""

    x: np.ndarray                       # float32 (rows, n_features): numbers filled, indicators, category indices
    unseen: dict[str, int]              # category column -> values not seen in training
    missing: dict[str, int]             # column -> missing cells

    @property
    def n_unseen(self) -> int:
        return sum(self.unseen.values())

    def numeric_and_categories(self, schema: Schema) -> tuple[np.ndarray, np.ndarray]:
        """(numeric part float32, category indices int64), split."""
        k = len(schema.categorical)
        cut = self.x.shape[1] - k
        return self.x[:, :cut], self.x[:, cut:].astype(np.int64)


def encode_columns(schema: Schema | Mapping[str, Any], columns: Mapping[str, Any], where: str = "predict",
                   path: str = "", row0: int = 0) -> Encoded:
    """Encode raw columns (name -> sequence of values; any order, extra columns ignored).

    Values may be numbers, text, ``None`` or NaN; text in ``schema.missing_values``
    is missing. A missing column is a one-line error naming it; a value of the
    wrong kind names its column and row (``row0`` + its position, 1-based).
    """
    if not isinstance(schema, Schema):
        schema = Schema.from_json(schema)
    where_path = f"{where}: {path}" if path else where
    absent = [c.name for c in schema.used if c.name not in columns]
    if absent:
        raise DataError(f"{where_path} lacks column {absent[0]!r} that the model needs"
                        + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""))
    miss_words = frozenset(schema.missing_values)
    n = None
    for c in schema.used:
        length = len(columns[c.name])
        if n is None:
            n = length
        elif length != n:
            raise DataError(f"{where_path}: column {c.name!r} has {length} values, others have {n}")
    n = n or 0
    nums: list[np.ndarray] = []
    inds: list[np.ndarray] = []
    cats: list[np.ndarray] = []
    unseen: dict[str, int] = {}
    missing: dict[str, int] = {}
    for c in schema.columns:
        if c.kind == "ignore":
            continue
        values = _column_array(columns[c.name], miss_words)
        if c.kind == "category":
            index = {v: i + RESERVED_LEVELS for i, v in enumerate(c.levels)}
            codes = np.empty(n, dtype=np.float32)
            n_miss = n_unseen = 0
            for k, v in enumerate(values):
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    codes[k] = 0
                    n_miss += 1
                    continue
                code = index.get(_category_text(v))
                if code is None:
                    codes[k] = 1
                    n_unseen += 1
                else:
                    codes[k] = code
            cats.append(codes)
            if n_unseen:
                unseen[c.name] = n_unseen
            if n_miss:
                missing[c.name] = n_miss
            continue
        x = _numbers_of(None, c.name, values, c.kind, where, path, row0)
        m = np.isnan(x)
        if m.any():
            missing[c.name] = int(m.sum())
        nums.append(np.where(m, c.fill, x).astype(np.float32))
        if c.indicator:
            inds.append(m.astype(np.float32))
    parts = nums + inds + cats
    xt = np.empty((len(parts), n), dtype=np.float32)  # filled by rows, transposed once: faster than stack
    for j, part in enumerate(parts):
        xt[j] = part
    return Encoded(np.ascontiguousarray(xt.T), unseen, missing)


def _column_array(values: Any, missing: frozenset[str]) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "fiub":
        return arr.astype(np.float64)
    out = np.empty(len(arr), dtype=object)
    for k, v in enumerate(arr.tolist()):
        if isinstance(v, str):
            v = v.strip()
            out[k] = None if v in missing else v
        else:
            out[k] = v
    return out


def encode_rows(schema: Schema | Mapping[str, Any], rows: Sequence[Mapping[str, Any]], where: str = "request") -> Encoded:
    """Encode a list of row mappings ``[{column: value}, ...]`` (a JSON request's ``rows``)."""
    if not isinstance(schema, Schema):
        schema = Schema.from_json(schema)
    columns: dict[str, list[Any]] = {}
    for c in schema.used:
        col = []
        for k, row in enumerate(rows):
            if c.name not in row:
                raise DataError(f"{where}: row {k + 1} lacks column {c.name!r} that the model needs")
            col.append(row[c.name])
        columns[c.name] = col
    return encode_columns(schema, {k: np.asarray(v, dtype=object) for k, v in columns.items()}, where)


def encode_table(schema: Schema, table: RawTable) -> Encoded:
    return encode_columns(schema, table.columns, table.where, table.path)


def unseen_note(enc: Encoded) -> str:
    """A line about unseen category values, or "" when there were none."""
    if not enc.unseen:
        return ""
    parts = ", ".join(f"{k}: {v}" for k, v in enc.unseen.items())
    return f"{enc.n_unseen} category value(s) not seen in training mapped to the unseen level ({parts})"


def describe_kinds(kinds: Mapping[str, Inferred]) -> Iterable[str]:
    """Lines for the log: each ignored column and why."""
    for name, inf in kinds.items():
        if inf.kind == "ignore":
            yield f"column {name!r} ignored: {inf.reason}"
