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

from core.config import Config, ConfigError, from_dict
from core.errors import ModelError, RunError
from core.runfiles.layout import CHECKPOINTS, RunDir
from core.runfiles.writing import atomic_write
from core.training.models import build_model

FORMAT = "traindesk.checkpoint"
VERSION = 1


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Save ``payload`` (tensors, numbers, strings, lists, dicts) atomically."""
    data = {"format": FORMAT, "version": VERSION, **payload}
    atomic_write(Path(path), lambda fh: torch.save(data, fh))


def checkpoint_file(run_dir: Path, which: str = "last", where: str = "checkpoint") -> Path:
    """The path of a run's ``last`` or ``best`` checkpoint (RunError naming what is missing)."""
    if which not in CHECKPOINTS:
        raise RunError(f"{where}: --checkpoint must be best or last, got {which!r}")
    path = RunDir(run_dir).checkpoint(which)
    if not path.is_file():
        why = "the run saved no weights" if which == "last" else "no evaluation of the run was kept as its best"
        raise RunError(f"{where}: {run_dir} has no checkpoints/{which}.pt: {why}")
    return path


def default_checkpoint(run_dir: Path) -> str:
    """What a run's model means when nobody chose: its best evaluation once best.pt exists, else the end."""
    return RunDir(run_dir).default_checkpoint()


def checkpoint_facts(run_dir: Path, which: str) -> dict[str, Any] | None:
    """``epoch``, ``steps`` and, for best.pt, ``monitor`` and ``value`` of a run's checkpoint (None when missing)."""
    if which not in CHECKPOINTS or not RunDir(run_dir).checkpoint(which).is_file():
        return None
    path = RunDir(run_dir).checkpoint(which)
    data = load_checkpoint(path)
    return {key: data.get(key) for key in ("epoch", "steps", "monitor", "value")}


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint safely; any problem is a one-line RunError."""
    path = RunDir.weights_file(path)
    if not path.is_file():
        raise RunError(f"checkpoint: file not found: {path}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        # torch's first line advises weights_only=False; the line naming the refused global says why
        first = next((ln for ln in lines if "GLOBAL" in ln or "Unsupported" in ln), lines[0] if lines else "")
        raise RunError(
            f"checkpoint: {path} holds objects other than weights and was refused (weights_only): {first[:160]}"
        ) from None
    except Exception as exc:
        raise RunError(f"checkpoint: {path} is not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RunError(f"checkpoint: {path} is not a TrainDesk checkpoint")
    return data


def check_checkpoint(
    data: dict[str, Any], where: str = "checkpoint"
) -> tuple[Config, tuple[int, ...], int, tuple[int, ...] | None]:
    """Validate a loaded checkpoint's tables: (config, input shape, classes, image shape)."""
    try:
        cfg = from_dict(data["config"])
    except (KeyError, TypeError, ConfigError) as exc:
        raise RunError(f"{where}: its config is unusable: {exc}") from None
    for key in ("info", "model"):
        if not isinstance(data.get(key), dict):
            raise RunError(f"{where}: has no {key!r} table (not a complete TrainDesk checkpoint)")
    info = data["info"]
    try:
        image_shape = tuple(int(v) for v in info["image_shape"]) if info.get("image_shape") else None
        input_shape, num_classes = tuple(int(v) for v in info["input_shape"]), int(info["num_classes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RunError(f"{where}: its info is unusable ({type(exc).__name__}: {exc})") from None
    return cfg, input_shape, num_classes, image_shape


def load_weights(model: nn.Module, state: Any, where: str = "checkpoint") -> None:
    """``model.load_state_dict(state)`` with a one-line error naming the first mismatch."""
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, ValueError, AttributeError) as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        first = next(
            (ln for ln in lines if ln.startswith(("size mismatch", "Missing key", "Unexpected key"))),
            lines[0] if lines else type(exc).__name__,
        )
        raise RunError(f"{where}: weights do not fit the model: {first[:200]}") from None


def model_from_checkpoint(data: dict[str, Any], where: str = "checkpoint") -> nn.Module:
    """Rebuild the model a checkpoint describes and load its weights."""
    cfg, input_shape, num_classes, image_shape = check_checkpoint(data, where)
    try:
        categories = tuple(int(c) for c in data["info"].get("categories") or ())
        texts = tuple(int(k) for k in data["info"].get("texts") or ())
        model = build_model(cfg.model, input_shape, num_classes, image_shape, categories, texts)
    except ModelError as exc:
        raise RunError(f"{where}: its model cannot be rebuilt: {exc}") from None
    load_weights(model, data["model"], where)
    model.eval()
    return model


def state_to_bytes(state: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def state_from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
