"""The kinds of input a trained model is given: one entry per kind, and finding which one a path is.

Each :class:`InputKind` has its name, suffixes, the words that name it, the file dialog's filter, its
reader and a row count judged without reading it. ``input_kind(path)`` is the kind of a path (a folder
is an image folder) or one error naming every accepted kind; ``INPUT_FILTERS`` is what an Open dialog
offers. Prediction (``core.services.predict``) and the window ask here instead of looking at suffixes
themselves, as they ask ``core.services.formats`` about model files.

The column kinds (CSV, Parquet, JSON lines) are tables of named columns: their ``read`` takes the
columns to read, chosen from the header, and gives :class:`core.readers.CsvData`; a model trained on
a table reads them whole with its schema (``core.schema.read_table``, ``scheme`` the kind's name).
Torch-free; pyarrow is imported by the reads.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.errors import DataError
from core.readers.arrow_file import read_json_lines, read_parquet
from core.readers.csv_columns import CsvData, Select
from core.readers.csv_file import read_csv

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}

Read = Callable[[Path, str, Select], CsvData]


@dataclass(frozen=True)
class InputKind:
    """One kind of input: a file format (by its suffixes) or a folder of images."""

    name: str  # "csv", "parquet", "jsonl", "npz", "images"
    label: str  # the words that name it: "CSV", "Parquet", ...
    suffixes: tuple[str, ...]  # lower case, with the dot; () for a folder
    help: str  # what it holds, for a command's help and the window
    estimate: Callable[[Path, int], int | None]  # about how many rows, without reading it all (None: unknown)
    read: Read | None = None  # a table of named columns: read the ones chosen from its header
    folder: bool = False

    @property
    def patterns(self) -> str:
        return " ".join(f"*{s}" for s in self.suffixes)

    @property
    def file_filter(self) -> str:
        """The Open dialog's filter for this kind: ``"Parquet (*.parquet)"``."""
        return f"{self.label} ({self.patterns})"

    @property
    def spelled(self) -> str:
        """``"a Parquet file (.parquet)"``: the kind in a sentence."""
        if self.folder:
            return f"an {self.label}"
        article = "an" if self.label[0] in "AEINO" else "a"
        return f"{article} {self.label} file ({', '.join(self.suffixes)})"

    def __repr__(self) -> str:
        return f"<input kind {self.name}>"


def _csv_rows(path: Path, cap: int) -> int | None:
    """A CSV's size over its first row's length (after the header)."""
    with path.open("rb") as fh:
        header = len(fh.readline(1 << 20))
        line = len(fh.readline(1 << 20)) or header or 1  # the first row's length, else the header's
    return max(0, path.stat().st_size - header) // line


def _json_lines_rows(path: Path, cap: int) -> int | None:
    """A JSON lines file's size over its first line's length (it has no header)."""
    with path.open("rb") as fh:
        line = len(fh.readline(1 << 20)) or 1
    return path.stat().st_size // line


def _parquet_rows(path: Path, cap: int) -> int | None:
    """The row count a Parquet file's footer records."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except pa.ArrowException:
        return None


def _npz_rows(path: Path, cap: int) -> int | None:
    """The length of the ``x`` array, from its header in the NPZ."""
    import numpy as np

    with zipfile.ZipFile(path) as zf, zf.open("x.npy") as fh:
        major, _ = np.lib.format.read_magic(fh)
        read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape = read_header(fh)[0]
    return int(shape[0]) if shape else None


def _image_rows(path: Path, cap: int) -> int | None:
    """The image files under the folder, counted up to ``cap``."""
    images = (f for f in path.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES)
    return sum(1 for _ in zip(range(cap), images))


CSV = InputKind("csv", "CSV", (".csv",), "a header, then one row per sample, columns by name", _csv_rows, read=read_csv)
PARQUET = InputKind(
    "parquet", "Parquet", (".parquet",), "one row per sample, columns by name", _parquet_rows, read=read_parquet
)
JSON_LINES = InputKind(
    "jsonl",
    "JSON lines",
    (".jsonl", ".ndjson"),
    "one JSON object per sample and line, keys by column name",
    _json_lines_rows,
    read=read_json_lines,
)
NPZ = InputKind("npz", "NPZ", (".npz",), "an array x, samples first (ids, y optional)", _npz_rows)
IMAGES = InputKind(
    "images", "image folder", (), "image files, in class folders for a test set", _image_rows, folder=True
)

INPUT_KINDS: tuple[InputKind, ...] = (CSV, PARQUET, JSON_LINES, NPZ, IMAGES)
_BY_SUFFIX = {s: kind for kind in INPUT_KINDS for s in kind.suffixes}
INPUT_SUFFIXES = tuple(_BY_SUFFIX)
# the Open dialog's filters: every input file first, then each kind
INPUT_FILTERS = ";;".join(
    ["Inputs (" + " ".join(f"*{s}" for s in INPUT_SUFFIXES) + ")"] + [k.file_filter for k in INPUT_KINDS if k.suffixes]
)


def accepted_kinds() -> str:
    """Every accepted kind in a sentence: ``"a CSV file (.csv), ... or an image folder"``."""
    spelled = [k.spelled for k in INPUT_KINDS]
    return ", ".join(spelled[:-1]) + " or " + spelled[-1]


def find_input_kind(path: Path) -> InputKind | None:
    """The kind of ``path`` (a folder: images), or None when no kind has its suffix."""
    path = Path(path)
    if path.is_dir():
        return IMAGES
    return _BY_SUFFIX.get(path.suffix.lower())


def input_kind(path: Path, where: str = "predict") -> InputKind:
    """The kind of ``path``; raise one :class:`DataError` naming the accepted kinds when it is none of them."""
    kind = find_input_kind(path)
    if kind is None:
        raise DataError(f"{where}: {path}: not an input; give {accepted_kinds()}")
    return kind


def estimated_rows(path: Path, cap: int) -> int | None:
    """About how many rows an input holds (an image folder's counted up to ``cap``), without reading it all;
    None when that cannot be told this way (reading the input then says what is wrong, if anything)."""
    kind = find_input_kind(path)
    if kind is None:
        return None
    try:
        return kind.estimate(Path(path), cap)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
