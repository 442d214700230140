"""Reading CSV, Parquet, JSON lines and NPZ files into numpy arrays: the one reader for training and prediction.

core.readers.csv_file reads a whole CSV (pyarrow's reader, or the
line-precise one whose errors name the line and the column);
core.readers.csv_pieces cuts a CSV with one line per record into pieces of
whole rows that other processes parse apart; core.readers.csv_typed reads a
whole CSV as a typed pyarrow table (a table's columns, kinds to infer);
core.readers.csv_columns holds what they take and give; core.readers.arrow_file reads a Parquet or JSON
lines file's columns into the same. core.readers.npz reads NPZ files without pickles. core.readers.inputs
is the registry of the kinds of input a trained model is given (suffixes, reader, row estimate, the
file dialog's filter).
Every read goes by blocks and asks between them whether to stop
(core.readers.blocks: ``READ_BLOCK_BYTES`` and ``SCAN_BYTES`` in
core.readers.csv_pieces are looked up there at each read).

Torch-free: ``core.services.predict`` imports this at command time.
"""

from core.readers.blocks import ReadStopped, check_stop, stop_reading_when
from core.readers.csv_columns import FLOAT32_MAX, Columns, CsvData, NotNumeric, Select, TextColumn, has_quotes
from core.readers.csv_file import read_csv
from core.readers.csv_pieces import CsvRows, CsvSplit, csv_split, read_csv_rows
from core.readers.inputs import (
    CSV,
    IMAGE_SUFFIXES,
    IMAGES,
    INPUT_FILTERS,
    INPUT_KINDS,
    INPUT_SUFFIXES,
    JSON_LINES,
    NPZ,
    PARQUET,
    InputKind,
    accepted_kinds,
    estimated_rows,
    find_input_kind,
    input_kind,
)
from core.readers.npz import (
    ID_KEYS,
    X_KEYS,
    Y_KEYS,
    NpzData,
    NpzRows,
    StoredArray,
    open_npz_rows,
    read_npz,
    stored_npz_x,
)

__all__ = [
    "CSV",
    "Columns",
    "CsvData",
    "CsvRows",
    "CsvSplit",
    "FLOAT32_MAX",
    "ID_KEYS",
    "IMAGES",
    "IMAGE_SUFFIXES",
    "INPUT_FILTERS",
    "INPUT_KINDS",
    "INPUT_SUFFIXES",
    "InputKind",
    "JSON_LINES",
    "NotNumeric",
    "NPZ",
    "NpzData",
    "NpzRows",
    "PARQUET",
    "ReadStopped",
    "Select",
    "StoredArray",
    "TextColumn",
    "X_KEYS",
    "Y_KEYS",
    "accepted_kinds",
    "check_stop",
    "csv_split",
    "estimated_rows",
    "find_input_kind",
    "has_quotes",
    "input_kind",
    "open_npz_rows",
    "read_csv",
    "read_csv_rows",
    "read_npz",
    "stop_reading_when",
    "stored_npz_x",
]
