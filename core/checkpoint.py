"""Checkpoints: model weights, optimizer states, progress and config in one file.

Written atomically (temp file, fsync, rename); read with ``weights_only=True``
so loading never executes pickled code.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.config import ConfigError, from_dict
from core.errors import RunError
from core.models import build_model
from core.runlog import atomic_write

FORMAT = "traindesk.checkpoint"
VERSION = 1


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Save ``payload`` (tensors, numbers, strings, lists, dicts) atomically."""
    data = {"format": FORMAT, "version": VERSION, **payload}
    atomic_write(Path(path), lambda fh: torch.save(data, fh))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint safely; any problem is a one-line RunError."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoints" / "last.pt"
    if not path.is_file():
        raise RunError(f"checkpoint: file not found: {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise RunError(
            f"checkpoint: {path} holds objects other than weights and was refused (weights_only): {first[:160]}"
        ) from None
    except Exception as exc:
        raise RunError(f"checkpoint: {path} is not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RunError(f"checkpoint: {path} is not a TrainDesk checkpoint")
    return data


def model_from_checkpoint(data: dict[str, Any], where: str = "checkpoint") -> nn.Module:
    """Rebuild the model a checkpoint describes and load its weights."""
    try:
        cfg = from_dict(data["config"])
    except (KeyError, ConfigError) as exc:
        raise RunError(f"{where}: its config is unusable: {exc}") from None
    info = data["info"]
    image_shape = tuple(info["image_shape"]) if info.get("image_shape") else None
    model = build_model(cfg.model, tuple(info["input_shape"]), int(info["num_classes"]), image_shape)
    try:
        model.load_state_dict(data["model"])
    except RuntimeError as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise RunError(f"{where}: weights do not fit the model: {first[:200]}") from None
    model.eval()
    return model


def state_to_bytes(state: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def state_from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
