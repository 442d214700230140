"""Data sources by scheme: built-in scikit-learn sets and synthetic data, CSV and Parquet tables, NPZ arrays,
image folders (:mod:`core.data.images`). :func:`read_source` reads one into a :class:`RawSource`."""

from __future__ import annotations

import math
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np
import torch

from core.config import BUILTIN_DATASETS, DataConfig
from core.data.images import read_image_folder
from core.data.raw import RawSource, where
from core.errors import DataError
from core.readers import TextColumn, open_npz_rows
from core.schema import RawTable

TABLE_SCHEMES = ("csv", "parquet")


def _builtin(name: str, query: str, source: str) -> RawSource:
    if name == "synthetic":
        return _synthetic(query, source)
    if query:
        raise DataError(f"{where(source)}: builtin:{name} takes no parameters")
    from sklearn import datasets as skd

    if name == "diabetes":  # a numeric target: regression
        bunch = skd.load_diabetes()
        x = np.asarray(bunch.data, dtype=np.float32)
        return RawSource(
            "diabetes",
            [],
            np.asarray(bunch.target, dtype=np.float32),
            x=x,
            feature_names=[str(f) for f in bunch.feature_names],
            task="regression",
            notes=[("info", "task: regression (builtin:diabetes has a numeric target)")],
        )

    loaders = {
        "digits": skd.load_digits,
        "iris": skd.load_iris,
        "wine": skd.load_wine,
        "breast_cancer": skd.load_breast_cancer,
    }
    if name not in loaders:
        raise DataError(
            f"{where(source)}: unknown built-in dataset {name!r}; choose one of " + ", ".join(BUILTIN_DATASETS)
        )
    bunch = loaders[name]()
    x = np.asarray(bunch.data, dtype=np.float32)
    names = [str(n) for n in bunch.target_names]
    feats = [str(f) for f in getattr(bunch, "feature_names", [])] or [f"f{i}" for i in range(x.shape[1])]
    image_shape = (1, 8, 8) if name == "digits" else None
    return RawSource(
        name, names, np.asarray(bunch.target, dtype=np.int64), x=x, feature_names=feats, image_shape=image_shape
    )


def _synthetic(query: str, source: str) -> RawSource:
    params = {"n": 10000, "features": 32, "classes": 10, "seed": 0}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in params:
            raise DataError(f"{where(source)}: unknown parameter {key!r}; known: " + ", ".join(params))
        try:
            params[key] = int(value)
        except ValueError:
            raise DataError(f"{where(source)}: parameter {key} must be an integer, got {value!r}") from None
    n, f, c = params["n"], params["features"], params["classes"]
    if not (2 <= c <= 1000 and 1 <= f <= 100000 and c <= n <= 50_000_000):
        raise DataError(f"{where(source)}: need 2 <= classes <= 1000, features >= 1, classes <= n")
    gen = torch.Generator().manual_seed(params["seed"])
    # Gaussian clusters around random centres: learnable, not trivially separable.
    centres = torch.randn(c, f, generator=gen) * (3.0 / math.sqrt(f)) * 1.5
    y = torch.randint(0, c, (n,), generator=gen)
    x = centres[y] + torch.randn(n, f, generator=gen) * 1.0
    return RawSource(
        f"synthetic(n={n},features={f},classes={c})",
        [f"class{i}" for i in range(c)],
        y.numpy(),
        x=x.numpy(),
        feature_names=[f"f{i}" for i in range(f)],
    )


def _encode_labels(column: TextColumn, source: str, what: str) -> tuple[np.ndarray, list[str]]:
    """Class names sorted (numerically when they are all numbers) and label indices."""
    uniq = sorted(set(column.values))
    try:
        uniq = sorted(uniq, key=float)
    except ValueError:
        pass
    if len(uniq) < 2:
        raise DataError(f"{where(source)}: {what} has only one class ({uniq[0] if uniq else 'none'}); need at least 2")
    rank = {v: i for i, v in enumerate(uniq)}
    order = np.array([rank[v] for v in column.values], dtype=np.int64)
    return order[column.codes], [str(u) for u in uniq]


def read_source_table(cfg: DataConfig) -> RawTable | None:
    """A csv: or parquet: source's columns as read (None for the other schemes); raise :class:`DataError`."""
    from core.schema import read_table

    scheme, _, rest = cfg.source.partition(":")
    if scheme not in TABLE_SCHEMES:
        return None
    return read_table(Path(rest).expanduser(), scheme, where(cfg.source), cfg.missing, exact=(cfg.target,))


def table_source(table: RawTable, cfg: DataConfig, task: str) -> RawSource:
    """A table read from a CSV or Parquet file: column kinds inferred (and overridden), rows without a target
    dropped."""
    from core.schema import choose_task, class_codes, describe_kinds, infer_kinds, regression_target, target_values

    source = cfg.source
    path = Path(table.path)
    if cfg.target not in table.columns:
        target_values(table, cfg.target)  # raises, naming the columns there are
    if len(table.columns) < 2:
        raise DataError(f"{where(source)}: {path} has no feature columns besides {cfg.target!r}")
    values, present = target_values(table, cfg.target)
    dropped = int((~present).sum())
    notes: list[tuple[str, str]] = []
    if dropped:
        table = table.take(np.flatnonzero(present), release=True)
        values = table.columns[cfg.target]
        notes.append(
            ("warning", f"{dropped} row(s) of {path.name} have no value in target column {cfg.target!r}: left out")
        )
    if table.n_rows == 0:
        raise DataError(f"{where(source)}: {path} has no row with a value in target column {cfg.target!r}")
    chosen, why = choose_task(values, task)
    kinds = infer_kinds(table, cfg.target, dict(cfg.columns))
    notes += [("info", line) for line in describe_kinds(kinds)]
    if chosen == "regression":
        y = regression_target(table, cfg.target, values)
        if len(np.unique(y)) < 2:
            raise DataError(
                f"{where(source)}: {path} target column {cfg.target!r} has a single value ({y[0]:g}); nothing to learn"
            )
        names: list[str] = []
    else:
        names, y = class_codes(values)
        if len(names) < 2:
            raise DataError(
                f"{where(source)}: target column {cfg.target!r} of {path} has only one class "
                f"({names[0] if names else 'none'}); need at least 2"
            )
    notes.insert(0, ("info", f"task: {chosen} ({why})"))
    return RawSource(
        path.stem, names, y, task=chosen, table=table, kinds=kinds, target_raw=values, dropped=dropped, notes=notes
    )


def _npz(path_text: str, source: str) -> RawSource:
    """An NPZ's labels, its ``x`` left in the file: training reads it by blocks into its one tensor."""
    path = Path(path_text).expanduser()
    rows = open_npz_rows(path, where(source))
    arrays = rows.labels
    y_raw, names_arr = arrays.y, arrays.class_names
    assert y_raw is not None
    uniq, codes = np.unique(y_raw, return_inverse=True)
    y, names = _encode_labels(
        TextColumn(codes.reshape(-1).astype(np.int64), [str(v) for v in uniq.tolist()]), source, f"{path}'s y"
    )
    if names_arr is not None and np.issubdtype(y_raw.dtype, np.integer) and int(y_raw.min()) >= 0:
        given = [str(n) for n in names_arr.tolist()]
        if len(given) > int(y_raw.max()):
            y, names = y_raw.astype(np.int64), given
    image_shape: tuple[int, int, int] | None = None
    x_shape = rows.shape
    if len(x_shape) == 4 and x_shape[1] in (1, 3):
        image_shape = (int(x_shape[1]), int(x_shape[2]), int(x_shape[3]))
    elif len(x_shape) == 3:
        image_shape = (1, int(x_shape[1]), int(x_shape[2]))
    n_features = math.prod(rows.shape[1:])
    return RawSource(
        path.stem, names, y, rows=rows, feature_names=[f"f{i}" for i in range(n_features)], image_shape=image_shape
    )


def read_source(cfg: DataConfig, task: str = "auto") -> RawSource:
    scheme, _, rest = cfg.source.partition(":")
    if scheme == "builtin":
        name, _, query = rest.partition("?")
        raw = _builtin(name, query, cfg.source)
        if task == "regression" and raw.task != "regression":
            raise DataError(
                f'{where(cfg.source)}: train.task = "regression" needs a numeric target; builtin:{name} has classes'
            )
        if task == "classification" and raw.task == "regression":
            raise DataError(
                f'{where(cfg.source)}: train.task = "classification" needs classes; builtin:{name} has a numeric target'
            )
        return raw
    if scheme in TABLE_SCHEMES:
        table = read_source_table(cfg)
        assert table is not None
        return table_source(table, cfg, task)
    if scheme == "npz":
        return _npz(rest, cfg.source)
    if scheme == "images":
        return read_image_folder(rest, cfg.image_size, cfg.source)
    raise DataError(f"data: unknown source scheme in {cfg.source!r}; use builtin:, csv:, parquet:, npz: or images:")
