"""The column schema of a table: inferred once, fitted on the training split, carried by every export.

A :class:`RawTable` holds a CSV's or Parquet file's columns as read (text as
``str`` with ``None`` for a missing cell, numbers as float64 with NaN for a
missing one). :func:`infer_kinds` says what each column is (``number``,
``category``, ``bool``, ``datetime``, ``text`` or ``ignore``, with a reason);
:func:`fit_schema` fits fill values (medians), missing indicators, category
levels, a date's statistics and a text's n-gram slots on the training rows; :func:`encode_columns` (and :func:`encode_rows` for a list of row
mappings, as a server receives them) turns raw columns in any order into the
model's input. The encoded row is

    [number and bool columns (missing filled with the median), missing
     indicators (1 where the cell was missing), each date's parts (and its
     indicator), each text's hashed n-gram buckets and weights, category indices]

as float32; category index 0 is the reserved "missing" level, 1 "unseen",
2.. the training levels. The model standardises the numeric part with the
statistics the schema also holds (``mean``/``std``, identity for
indicators and categories) and looks the categories up in embeddings
(:mod:`core.training.models`). The schema is plain JSON (:meth:`Schema.to_json`),
stored in the checkpoint and ``model.json``.

Torch-free: prediction and serving import this without the training stack.

The package's modules: core.schema.cells (what a cell is), .table (a table as
read), .kinds (inference), .dates (a date's forms and parts), .text (free text
as hashed n-grams), .sentences (free text as a sentence encoder's embedding, imported
when used), .target (classes or a number), .spec (the fitted schema and
its JSON), .fit (fitting it), .encode (encoding rows with it).
"""

from core.schema.cells import DEFAULT_MISSING, FALSE_WORDS, TRUE_WORDS, CellError, category_text
from core.schema.encode import Encoded, encode_columns, encode_rows, encode_table, unseen_note
from core.schema.fit import fit_schema
from core.schema.kinds import (
    ID_NAMES,
    KINDS,
    MIN_ROWS_FOR_TEXT_RULES,
    Inferred,
    column_detail,
    describe_kinds,
    infer_kind,
    infer_kinds,
    max_levels,
)
from core.schema.spec import (
    MISSING_LEVEL,
    RESERVED_LEVELS,
    SCHEMA_VERSION,
    UNSEEN_LEVEL,
    ColumnSpec,
    Schema,
    embedding_size,
)
from core.schema.table import RawTable, WholeRead, read_table, table_blocks, table_piece
from core.schema.target import (
    IMBALANCE_RATIO,
    OBVIOUS_TARGETS,
    REGRESSION_MIN_LEVELS,
    choose_task,
    class_codes,
    class_names,
    propose_target,
    regression_target,
    target_values,
)

_category_text = category_text  # the name tabular prediction imports

__all__ = [
    "CellError",
    "ColumnSpec",
    "DEFAULT_MISSING",
    "Encoded",
    "FALSE_WORDS",
    "ID_NAMES",
    "IMBALANCE_RATIO",
    "Inferred",
    "KINDS",
    "MIN_ROWS_FOR_TEXT_RULES",
    "MISSING_LEVEL",
    "OBVIOUS_TARGETS",
    "REGRESSION_MIN_LEVELS",
    "RESERVED_LEVELS",
    "RawTable",
    "SCHEMA_VERSION",
    "Schema",
    "TRUE_WORDS",
    "UNSEEN_LEVEL",
    "WholeRead",
    "category_text",
    "choose_task",
    "class_codes",
    "class_names",
    "column_detail",
    "describe_kinds",
    "embedding_size",
    "encode_columns",
    "encode_rows",
    "encode_table",
    "fit_schema",
    "infer_kind",
    "infer_kinds",
    "max_levels",
    "propose_target",
    "read_table",
    "table_blocks",
    "table_piece",
    "regression_target",
    "target_values",
    "unseen_note",
]
