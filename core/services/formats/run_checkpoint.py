"""A run's checkpoint as a model file: described as its export would be, rebuilt as a ``.safetensors`` is.

So predicting with a run directory or its checkpoint gives the predictions of
``export --format safetensors`` then ``predict``, byte for byte. Never written by an export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import RunError
from core.services.formats.base import ModelFormat
from core.services.formats.description import bare_state_dict_error, describe, in_folder
from core.services.formats.module import load_state_dict_file, rebuild_module, standardized, torch_runner
from core.services.formats.predictor import Predictor


def load_run_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint's contents; a bare state dict gets the error that says what to export instead."""
    from core.training.checkpoint import load_checkpoint

    try:
        return load_checkpoint(path)
    except RunError as exc:
        try:
            load_state_dict_file(path)
        except RunError:
            raise exc from None  # neither: the checkpoint's reason
        raise bare_state_dict_error(path) from None


def checkpoint_meta(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The description an export of this checkpoint would carry (``describe``), for prediction in place."""
    from core.training.checkpoint import check_checkpoint

    where = f"predict: {path}"
    check_checkpoint(data, where)
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    try:
        meta = in_folder(describe(data, run_dir), run_dir)
    except (KeyError, TypeError, ValueError) as exc:
        raise RunError(f"{where}: its info is unusable ({type(exc).__name__}: {exc})") from None
    return {
        **meta,
        "export": {
            "format": "checkpoint",
            "checkpoint": path.stem,
            "preprocessing_included": False,
            "input": "standardised features: apply 'preprocessing' first",
            "output": "logits",
        },
    }


class RunCheckpointFormat(ModelFormat):
    name = "checkpoint"
    suffix = ".pt"
    label = "a run's checkpoint (.pt)"

    def read_meta(self, path: Path) -> dict[str, Any]:
        return checkpoint_meta(path, load_run_checkpoint(path))

    def load(self, path: Path, threads: int = 0, meta: dict[str, Any] | None = None) -> Predictor:
        """A run's checkpoint, rebuilt and standardised exactly as its .safetensors export would be."""
        data = load_run_checkpoint(path)
        meta = checkpoint_meta(path, data)
        module = standardized(rebuild_module(meta, data["model"], str(path)), meta, "probabilities", str(path))
        return Predictor(path, meta, torch_runner(module), "probabilities")


RUN_CHECKPOINT = RunCheckpointFormat()
