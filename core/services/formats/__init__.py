"""The model formats: one entry per format, and finding which one a path is.

``EXPORT_FORMATS`` are what an export writes (``--format`` name -> ``ModelFormat``);
``format_of(path)`` is the format a file is read with (a ``.pt`` that a ``model.json``
lists is a state dict, any other ``.pt`` a run's checkpoint); ``resolve_model_path``
turns a run directory or a ``model.json`` into the file it stands for;
``read_model_meta`` and ``load_predictor`` read any of them; ``model_file_filter`` is an Open
dialog's filter for them. Export, predict, evaluate,
serving and the window all ask here instead of looking at suffixes themselves.
Nothing here imports torch (an ONNX model is read and run without it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import ModelFileError, UserError
from core.services.formats.base import ModelFormat
from core.services.formats.compact import EXECUTORCH, EXECUTORCH_INT8, ONNX_INT8
from core.services.formats.description import SIDECAR, read_sidecar, sidecar_entry
from core.services.formats.onnx import ONNX
from core.services.formats.predictor import Predictor
from core.services.formats.run_checkpoint import RUN_CHECKPOINT
from core.services.formats.safetensors import SAFETENSORS
from core.services.formats.state_dict import STATE_DICT
from core.services.formats.torch_export import TORCH_EXPORT

EXPORT_FORMATS: dict[str, ModelFormat] = {
    f.name: f for f in (SAFETENSORS, STATE_DICT, TORCH_EXPORT, ONNX, ONNX_INT8, EXECUTORCH, EXECUTORCH_INT8)
}
OUTPUTS = ("probabilities", "logits")  # what an exported graph returns
# the files that run on their own, in the order a model.json's files are preferred
RUNNABLE: tuple[ModelFormat, ...] = (SAFETENSORS, TORCH_EXPORT, ONNX, STATE_DICT, EXECUTORCH)
RUNNABLE_SUFFIXES = tuple(f.suffix for f in RUNNABLE)
_BY_SUFFIX = {f.suffix: f for f in RUNNABLE}


def model_file_filter(label: str = "Models") -> str:
    """An Open dialog's filter for every model file predict and serve read: the runnable suffixes and model.json."""
    return f"{label} (" + " ".join(f"*{s}" for s in RUNNABLE_SUFFIXES) + f" {SIDECAR})"


def export_format(name: str) -> ModelFormat:
    if name not in EXPORT_FORMATS:
        raise UserError(f"export: unknown format {name!r}; choose one of " + ", ".join(EXPORT_FORMATS))
    return EXPORT_FORMATS[name]


def format_of(path: Path) -> ModelFormat:
    """The format a resolved model file is read with."""
    fmt = _BY_SUFFIX.get(Path(path).suffix)
    if fmt is None:
        raise ModelFileError(f"model: {path} is not an exported model")
    if fmt is STATE_DICT and sidecar_entry(Path(path)) is None:  # a .pt no model.json lists: a run's checkpoint
        return RUN_CHECKPOINT
    return fmt


def runtime(model_path: Path) -> str:
    """What runs this (resolved) model file: "onnx" for an ONNX graph, "torch" for everything else."""
    fmt = _BY_SUFFIX.get(Path(model_path).suffix)
    return fmt.runtime if fmt is not None else "torch"


def needs_torch(model_path: Path) -> bool:
    """Whether running this (resolved) model file needs torch: everything but an ONNX graph."""
    return runtime(model_path) == "torch"


def is_run_dir(path: Path) -> bool:
    """A run directory (it holds checkpoints/ or its config.toml), not an export folder."""
    from core.runfiles.layout import RunDir

    run = RunDir(path)
    return run.path.is_dir() and (run.checkpoints.is_dir() or run.is_run())


def resolve_model_path(path: Path, checkpoint: str | None = None) -> Path:
    """A model file; a ``model.json`` (or a folder holding one) stands for the first runnable file it lists,
    a run directory for its ``checkpoint`` (best or last; None: best once best.pt exists, else last)."""
    path = Path(path).expanduser()
    if is_run_dir(path):
        from core.runfiles.layout import RunDir
        from core.training.checkpoint import checkpoint_file

        return checkpoint_file(path, checkpoint or RunDir(path).default_checkpoint(), "predict")
    if checkpoint is not None:
        raise UserError(f"predict: --checkpoint chooses the checkpoint of a run directory; {path} is not one")
    if path.is_dir():
        path = path / SIDECAR
    if path.name.endswith(".json"):
        if not path.is_file():
            raise ModelFileError(f"model: file not found: {path}")
        meta = read_sidecar(path)
        files = [path.parent / name for name in meta.get("files") or {}]
        files.sort(key=lambda p: RUNNABLE_SUFFIXES.index(p.suffix) if p.suffix in RUNNABLE_SUFFIXES else 99)
        runnable = [p for p in files if p.is_file() and p.suffix in RUNNABLE_SUFFIXES]
        if not runnable:
            raise ModelFileError(f"model: {path} lists no model file that exists beside it")
        return runnable[0]
    if not path.is_file():
        raise ModelFileError(f"model: file not found: {path}")
    if path.suffix not in RUNNABLE_SUFFIXES:
        raise ModelFileError(
            f"model: {path} is not an exported model; use a .safetensors (with its model.json), .pt2, .onnx or .pte "
            "file, a run directory or a checkpoint"
        )
    return path


def read_model_meta(path: Path) -> dict[str, Any]:
    """The description of an exported model (classes, input), without building it where possible."""
    path = resolve_model_path(path)
    return format_of(path).read_meta(path)


def load_predictor(path: Path, threads: int = 0) -> Predictor:
    """Load any runnable export; ``threads`` > 0 caps this process's compute threads."""
    path = resolve_model_path(path)
    fmt = format_of(path)
    if threads > 0 and fmt.needs_torch:  # an ONNX graph gets its threads from its session: no torch import
        import torch

        torch.set_num_threads(threads)
    return fmt.load(path, threads)


__all__ = [
    "EXPORT_FORMATS",
    "ModelFormat",
    "ONNX",
    "ONNX_INT8",
    "OUTPUTS",
    "Predictor",
    "RUNNABLE_SUFFIXES",
    "RUN_CHECKPOINT",
    "SAFETENSORS",
    "STATE_DICT",
    "TORCH_EXPORT",
    "export_format",
    "format_of",
    "is_run_dir",
    "load_predictor",
    "model_file_filter",
    "needs_torch",
    "read_model_meta",
    "resolve_model_path",
    "runtime",
]
