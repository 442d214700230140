"""The data a face offers and describes: the built-in datasets, a source described for a picker (off the GUI
thread: it reads the source), the target a table's columns suggest. The kinds of input a model answers are
:mod:`core.services.inputs`. Importing it imports no torch (the window does at its start); describing does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.config import BUILTIN_DATASETS
from core.schema import column_detail, propose_target

if TYPE_CHECKING:
    from core.config import Config
    from core.data import DatasetInfo, PreparedData

__all__ = [
    "BUILTIN_DATASETS",
    "column_detail",
    "describe_columns",
    "describe_source",
    "propose_target",
    "run_data",
]


def describe_source(
    source: str,
    target: str = "label",
    image_size: int = 0,
    task: str = "auto",
    columns: Any = (),
    missing: Sequence[str] | None = None,
) -> DatasetInfo:
    """A source described for a picker: sizes, classes, a small preview, a table's schema (DataError: why not)."""
    from core.data import describe_source as describe

    return describe(source, target, image_size, task, columns, missing)


def describe_columns(
    source: str,
    target: str = "label",
    columns: Mapping[str, Any] | Sequence[Any] = (),
    missing: Sequence[str] | None = None,
) -> DatasetInfo:
    """A table's columns alone, without fitting anything: what a picker lists while the description fails."""
    from core.data import describe_columns as describe

    return describe(source, target, columns, missing)


def run_data(cfg: Config, info: Mapping[str, Any] | None = None, run_dir: Path | None = None) -> PreparedData:
    """The data a run of ``cfg`` trained on, split and encoded as it was: its seed, task, image input and text
    encoder, in this process's memory (what evaluation, export and the lr finder read the run's rows from).
    ``info``: the run's checkpoint's, whose schema names the encoder its texts were embedded by (a fine-tuned
    one is the run's own, in ``run_dir``); without it, ``model.text_encoder`` as it is, frozen."""
    from core.data import load_data
    from core.data.text_tuning import encoder_of
    from core.schema.sentences import located
    from core.training.backbones import image_input

    return load_data(
        cfg.data,
        seed=cfg.train.seed,
        share=False,
        task=cfg.train.task,
        images=image_input(cfg),
        text_encoder=encoder_of(located((info or {}).get("schema"), Path(run_dir or "."))) or cfg.model.text_encoder,
    )
