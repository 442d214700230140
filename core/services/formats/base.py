"""What every model format is: its names, how it is read and written, and the exporters' common quiet.

A format is an object (``ModelFormat``) with its ``--format`` name, file suffix, the window's label
and four operations: ``read_meta`` (the model description the file carries or the ``model.json``
beside it), ``load`` (a ``Predictor``), ``write`` (an export of a trained module) and ``reload``
(the written file read back with the format's own loader, for the export's verification).
Torch-free at import: torch, safetensors and onnxruntime load inside the operations that need them.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from core.services.formats.predictor import Predictor


class ModelFormat:
    """One file format of a trained model."""

    name: str = ""  # the export's --format value (and the "format" of its model.json entry)
    suffix: str = ""  # the file's suffix
    stem: str = "model"  # the exported file's name before its suffix
    label: str = ""  # the window's words for it
    graph: bool = False  # a program with the standardisation inside: raw features in
    runtime: str = "torch"  # what runs it: "torch" or "onnx"
    takes_raw_columns: bool = False  # a table's model takes the raw columns, its lookups inside the file
    reloads_as: str | None = None  # what ``reload`` returns: fixed, or None for the export's --output
    lossy: bool = False  # answers close to the trained model's, not equal: its cost is checked, not a tolerance
    calibrates: bool = False  # written from a sample of the training split (``write``'s rows), not validation rows

    @property
    def needs_torch(self) -> bool:
        return self.runtime == "torch"

    def output_of(self, output: str) -> str:
        """What a file of this format returns when the export asked for ``output``."""
        return output if self.graph else "logits"

    def read_meta(self, path: Path) -> dict[str, Any]:
        """The model description of a file of this format, without building the model where possible."""
        raise NotImplementedError

    def load(self, path: Path, threads: int = 0, meta: dict[str, Any] | None = None) -> Predictor:
        """The file as a predictor; ``threads`` > 0 caps a runtime's own compute threads."""
        raise NotImplementedError

    def write(self, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
        """Write ``model`` (trained, standardised input) described by ``desc``; ``raw`` is a batch to trace."""
        raise NotImplementedError(f"{self.name} is not written by an export")

    def reload(
        self, path: Path, desc: dict[str, Any], output: str, raw: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray | None, str]:
        """The written file on ``raw``: (outputs on the batch, on its first row alone or None, the loader)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<model format {self.name}>"


def first_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:200]}"


@contextlib.contextmanager
def quiet_exporters() -> Iterator[None]:
    """Silence the exporters' chatter (missing torchvision ops, deprecations); errors still raise."""
    quiet = {n: logging.ERROR for n in ("torch.onnx", "torch.export", "torch._export", "onnxscript")}
    # onnx_ir reports each optimisation pass at INFO ("Removed 7 unused nodes"): a window logging at INFO
    # would print them on its terminal; its warnings still come through
    quiet["onnx_ir"] = logging.WARNING
    loggers = [logging.getLogger(n) for n in quiet]
    levels = [lg.level for lg in loggers]
    bar = _tqdm_class()
    interval = bar.monitor_interval if bar is not None else 0
    try:
        for lg in loggers:
            lg.setLevel(quiet[lg.name])
        if bar is not None:
            # torch.fx's interpreter makes a (disabled) tqdm bar during ONNX decompositions; its first
            # bar would start tqdm's monitor thread, which then lives as long as the process
            bar.monitor_interval = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if bar is not None:
            bar.monitor_interval = interval


def _tqdm_class() -> Any:
    try:
        from tqdm import std
    except ImportError:
        return None
    return std.tqdm


def example_batch(raw: torch.Tensor) -> torch.Tensor:
    # batch 2, not 1: torch.export specialises a dimension whose example size is 0 or 1
    return raw[:2].clone()
