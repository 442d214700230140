"""What prediction reads: rows of raw features from a table of columns (CSV, Parquet, JSON lines), an
NPZ or an image folder, with ids and, when the input has them, the true classes (a test set).

The kind of input is ``core.readers.input_kind``'s (the registry of inputs). A table's columns are
matched to the model's features by name (or taken in order, ``by_position``), whatever file holds
them; a model trained on a table with a schema encodes it whole (``core.services.predict.table``);
images are decoded when their batch is predicted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from core.errors import DataError
from core.readers.inputs import CSV, IMAGE_SUFFIXES, NPZ, InputKind, accepted_kinds, input_kind

if TYPE_CHECKING:
    import numpy as np

LABEL_COLUMNS = ("label", "target", "class", "y")  # a column with the true classes makes a test set


class RowNumbers(Sequence[str]):
    """The ids of rows that have none of their own: their numbers ("0", "1", ...) in the input, each made
    when asked for (a list of 200,000 of them took the calling process 37 ms)."""

    def __init__(self, rows: range) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> RowNumbers: ...

    def __getitem__(self, i: int | slice) -> str | RowNumbers:
        return RowNumbers(self.rows[i]) if isinstance(i, slice) else str(self.rows[i])

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a list is; typeshed types __hash__ as a method only

    def __repr__(self) -> str:
        return f"RowNumbers({self.rows.start}, {self.rows.stop})"


@dataclass(frozen=True)
class PredictInput:
    """Rows to predict: ids, and either raw features in memory or image files decoded on demand."""

    ids: Sequence[str]
    x: np.ndarray | None = None
    paths: tuple[str, ...] = ()
    labels: list[str] | None = None  # the true classes, when the input has them (a test set)
    image_shape: tuple[int, ...] = ()  # decode images to this (C, H, W); empty: the model's input shape
    image_prep: Any = None  # core.readers.images.ImagePrep: how images are decoded (None: squash to image_shape)
    pixel_scale: float = 1.0  # decoded pixels are [0, 1]; x 255 for a model trained on 0-255 arrays
    notes: tuple[str, ...] = ()  # what reading it met (a table's unseen category values)

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, start: int, stop: int, shape: Sequence[int]) -> np.ndarray:
        """Raw rows ``start:stop`` as float32 (decoding images if needed)."""
        import numpy as np

        if self.paths:
            from core.readers.images import decode_image

            prep = self.image_prep or self.image_shape or tuple(shape)
            decoded = np.stack([decode_image(p, prep) for p in self.paths[start:stop]])
            if self.pixel_scale != 1.0:
                decoded *= self.pixel_scale
            return decoded.reshape((len(decoded), *shape))
        assert self.x is not None
        return np.asarray(self.x[start:stop], dtype=np.float32)


@dataclass(frozen=True)
class CsvPlan:
    """Which columns of a table's header (a CSV's, a Parquet file's, ...) feed the model, name the rows and hold true classes."""

    columns: Any  # core.readers.Columns: the features (numbers), then the id and label columns (text)
    id_col: int | None
    label_col: int | None


class ColumnNamesDiffer(DataError):
    """A CSV has as many feature columns as the model takes, under other names: usable by position."""

    def __init__(self, message: str, expected: list[str], found: list[str]) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


def _names(names: Sequence[str], limit: int = 3) -> str:
    """'a', 'b', 'c' … 'z': the first few names and the last, for a message of one line."""
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" … {names[-1]!r}" if len(names) > limit else "")


def csv_plan(path: Path, meta: dict[str, Any], header: list[str], by_position: bool = False) -> CsvPlan:
    """Match the header to the model's features by name; ``by_position`` takes the header's columns (but an
    ``id`` and a label column) in order instead, when the names differ but the count is the same."""
    from core.readers import Columns

    features = [str(f) for f in meta["input"].get("features") or []]
    n_features = math.prod(int(s) for s in meta["input"]["shape"])
    if len(features) != n_features:
        raise DataError(f"predict: the model takes {n_features} values per sample, not named columns; give an NPZ")
    index = {name: i for i, name in enumerate(header)}
    missing = [f for f in features if f not in index]
    id_col = index.get("id")
    target = next((c for c in LABEL_COLUMNS if c in index and c not in features), None)
    label_col = index[target] if target else None
    text = [c for c in (id_col, label_col) if c is not None]
    others = [i for i in range(len(header)) if i not in text]  # the columns that could be features
    if missing and by_position and len(others) != n_features:
        raise DataError(
            f"predict: {path} has {len(others)} feature columns, the model takes {n_features}; "
            "--by-position needs the same number, in the training order"
        )
    if missing and len(others) == n_features:
        if by_position:
            return CsvPlan(Columns(numeric=others, text=text), id_col, label_col)
        found = [header[i] for i in others]
        raise ColumnNamesDiffer(
            f"predict: {path} has the model's {n_features} feature columns' count but not their names "
            f"({_names(found)} where the model has {_names(features)}); pass --by-position to use them in order",
            features,
            found,
        )
    if missing:
        raise DataError(
            f"predict: {path} lacks {len(missing)} of the model's {n_features} feature columns, e.g. "
            + ", ".join(repr(m) for m in missing[:4])
            + f"; the model takes {_names(features)}"
        )
    return CsvPlan(Columns(numeric=[index[f] for f in features], text=text), id_col, label_col)


class CsvPlanner:
    """The column chooser core.readers calls with a table's header; keeps the plan it made."""

    def __init__(self, path: Path, meta: dict[str, Any], by_position: bool = False) -> None:
        self.path, self.meta, self.by_position = path, meta, by_position
        self.plan: CsvPlan | None = None

    def __call__(self, header: list[str]) -> Any:
        self.plan = csv_plan(self.path, self.meta, header, self.by_position)
        return self.plan.columns


def read_columns_input(
    path: Path, meta: dict[str, Any], by_position: bool = False, kind: InputKind = CSV
) -> PredictInput:
    """The model's feature columns, by name (or in order), from a table of columns (``kind``: CSV, Parquet,
    JSON lines); an ``id`` column, if any, names the rows, a label column holds the true classes."""
    assert kind.read is not None
    planner = CsvPlanner(path, meta, by_position)
    table = kind.read(path, "predict", planner)
    plan = planner.plan
    assert plan is not None
    x = table.x
    ids = table.text[plan.id_col].tolist() if plan.id_col is not None else RowNumbers(range(x.shape[0]))
    labels = [str(v) for v in table.text[plan.label_col].tolist()] if plan.label_col is not None else None
    return PredictInput(ids, x=x.reshape((x.shape[0], *meta["input"]["shape"])), labels=labels)


def read_csv_input(path: Path, meta: dict[str, Any], by_position: bool = False) -> PredictInput:
    """A CSV's feature columns (:func:`read_columns_input`)."""
    return read_columns_input(path, meta, by_position, CSV)


def read_npz_input(path: Path, meta: dict[str, Any]) -> PredictInput:
    """Array ``x`` (N, ...) from an NPZ; an ``id``/``ids`` array, if any, names the rows."""
    from core.readers import read_npz

    shape = tuple(int(s) for s in meta["input"]["shape"])
    arrays = read_npz(path, "predict", labels=False)
    x = arrays.x
    if math.prod(x.shape[1:]) != math.prod(shape):
        raise DataError(f"predict: {path}: x has samples of shape {x.shape[1:]}, the model takes {shape}")
    x = x.reshape((x.shape[0], *shape))
    ids = [str(v) for v in arrays.ids.tolist()] if arrays.ids is not None else RowNumbers(range(x.shape[0]))
    return PredictInput(ids, x=x, labels=_npz_labels(path, x.shape[0], meta))


def _npz_labels(path: Path, n: int, meta: dict[str, Any]) -> list[str] | None:
    """The NPZ's ``y`` as class names, if it has one of the right length (a test set)."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as npz:
            key = next((k for k in ("y", "Y", "labels", "label") if k in npz.files), None)
            y = np.asarray(npz[key]) if key else None
    except (OSError, ValueError):
        return None
    if y is None or y.shape[:1] != (n,):
        return None
    return _class_labels(y.reshape(-1).tolist(), [str(c) for c in meta.get("classes") or []])


def _class_labels(values: list[Any], classes: list[str]) -> list[str]:
    """True labels as class names: integers index the classes unless they are class names themselves."""
    names = set(classes)
    out = []
    for v in values:
        text = str(int(v)) if isinstance(v, float) and float(v).is_integer() else str(v)
        if text not in names and isinstance(v, (int, float)) and 0 <= int(v) < len(classes):
            text = classes[int(v)]
        out.append(text)
    return out


def model_image_shape(meta: dict[str, Any]) -> tuple[int, ...] | None:
    """The (C, H, W) a model's images are decoded to, or None when it takes no images (a table's features,
    digits' named pixel_0_0... columns included, whatever they picture)."""
    shape = [int(s) for s in meta["input"]["shape"]]
    image_shape = [int(s) for s in meta["input"].get("image_shape") or []]
    if len(shape) == 3:
        image_shape = shape
    elif _named_features(meta) or reads_table(meta):
        return None
    elif len(image_shape) == 2:
        image_shape = [1, *image_shape]
    if len(image_shape) != 3 or math.prod(image_shape) != math.prod(shape):
        return None
    return tuple(image_shape)


def read_image_input(root: Path, meta: dict[str, Any]) -> PredictInput:
    """Every image under ``root`` (recursively, sorted); ids are their paths relative to ``root``."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    image_files_input([], meta, f"{root} is an image folder")  # a table's model: said before the folder is looked into
    if not files:
        raise DataError(f"predict: {root} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    ids = [p.relative_to(root).as_posix() for p in files]
    # A class-folder tree (root/<class>/image) is a labelled test set.
    classes = {str(c) for c in meta.get("classes") or []}
    tops = [i.split("/")[0] if "/" in i else None for i in ids]
    labels = [str(t) for t in tops] if tops and all(t in classes for t in tops) else None
    return image_files_input(files, meta, f"{root} is an image folder", ids, labels)


def image_files_input(
    files: Sequence[Path],
    meta: dict[str, Any],
    where: str,
    ids: Sequence[str] | None = None,
    labels: list[str] | None = None,
) -> PredictInput:
    """Image files to predict, decoded when their batch is (ids: the paths as given unless named); ``where``
    says what they are in an error ("X is an image folder")."""
    image_shape = model_image_shape(meta)
    if image_shape is None:
        n = math.prod(int(s) for s in meta["input"]["shape"])
        raise DataError(
            f"predict: {where} but the model takes {n} tabular features; "
            "give a table of its features (CSV, Parquet, JSON lines) or an NPZ"
        )
    # A model trained on an array of 0-255 pixels (its mean says so) gets them as it learned them.
    scale = (
        255.0
        if max((abs(float(m)) for m in (meta.get("preprocessing") or {}).get("mean") or [0.0]), default=0.0) > 1.5
        else 1.0
    )
    from core.readers.images import prep_of

    prep = prep_of(meta["input"].get("image_prep"), image_shape)
    return PredictInput(
        [str(p) for p in files] if ids is None else ids,
        paths=tuple(str(p) for p in files),
        labels=labels,
        image_shape=tuple(image_shape),
        image_prep=prep,
        pixel_scale=scale,
    )


def _named_features(meta: dict[str, Any]) -> bool:
    """Whether the training data named its features (an array's are only numbered f0, f1, ...)."""
    names = [str(f) for f in meta["input"].get("features") or []]
    return bool(names) and names != [f"f{i}" for i in range(len(names))]


def reads_table(meta: dict[str, Any]) -> bool:
    """Whether the model was trained on a table with a schema: its input is encoded whole, by the schema."""
    return bool((meta.get("schema") or {}).get("columns"))


def read_input(path: Path, meta: dict[str, Any], by_position: bool = False) -> PredictInput:
    """Read an input of any kind the registry (``core.readers.INPUT_KINDS``) has, for the model ``meta`` describes."""
    path = Path(path).expanduser()
    if path.is_dir():
        return read_image_input(path, meta)
    if not path.is_file():
        raise DataError(f"predict: input not found: {path}")
    if path.suffix.lower() in IMAGE_SUFFIXES:  # one image: a folder of one
        return image_files_input([path], meta, f"{path} is an image", [path.name])
    kind = input_kind(path)
    if kind.read is not None and reads_table(meta):  # the schema encodes the columns, all of them
        from core.services.predict.table import read_table_input

        parts = read_table_input(path, meta, kind.name)
        if parts["ids"] is None:
            parts["ids"] = RowNumbers(range(len(parts["x"])))
        return PredictInput(**parts)
    if kind.read is not None:
        return read_columns_input(path, meta, by_position, kind)
    if kind is NPZ:
        return read_npz_input(path, meta)
    raise DataError(f"predict: {path}: {kind.spelled} is read as a folder; give {accepted_kinds()}")


def check_shape(inp: PredictInput, meta: dict[str, Any], path: Path) -> None:
    shape = tuple(int(s) for s in meta["input"]["shape"])
    if inp.x is not None and tuple(inp.x.shape[1:]) != shape:
        raise DataError(f"predict: {path}: samples have shape {tuple(inp.x.shape[1:])}, the model takes {shape}")
