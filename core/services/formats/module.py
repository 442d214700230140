"""The trained module behind every torch format: rebuilt from a description, wrapped with its preprocessing.

``rebuild_module`` builds the described architecture and loads its weights; ``standardized`` puts
the training standardisation in front (and a regression target's scale, or a softmax, behind);
``load_state_dict_file`` reads ``.pt`` weights refusing pickled code. Torch loads on first use.
"""

from __future__ import annotations

import functools
import math
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ModelFileError, RunError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


def stats_shape(input_shape: Sequence[int], n_stats: int, where: str) -> tuple[int, ...]:
    """How mean/std broadcast over one sample: per feature (the sample's shape) or per image channel."""
    if n_stats == math.prod(input_shape):
        return tuple(input_shape)
    if len(input_shape) == 3 and n_stats == input_shape[0]:
        return (int(input_shape[0]), 1, 1)
    raise RunError(f"{where}: {n_stats} standardisation statistics do not fit input shape {tuple(input_shape)}")


@functools.cache
def _standardized_class() -> type:
    # Built on first use so that importing this module does not import torch.
    import torch
    from torch import nn

    class Standardized(nn.Module):
        """Raw features in; the trained model behind the training standardisation; logits or probabilities out."""

        mean: torch.Tensor
        std: torch.Tensor

        def __init__(
            self,
            model: nn.Module,
            mean: torch.Tensor,
            std: torch.Tensor,
            probabilities: bool,
            target_scale: tuple[float, float] | None = None,
        ) -> None:
            super().__init__()
            self.model = model
            self.register_buffer("mean", mean)
            self.register_buffer("std", std)
            self.probabilities = probabilities
            self.target_scale = target_scale  # regression: the output in the target's units

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.model((x - self.mean) / self.std)
            if self.target_scale is not None:
                return z * self.target_scale[1] + self.target_scale[0]
            return torch.softmax(z, dim=1) if self.probabilities else z

    return Standardized


def standardized(model: nn.Module, meta: dict[str, Any], output: str, where: str = "model") -> nn.Module:
    """``model`` wrapped with the preprocessing that ``meta`` describes; output "logits" or "probabilities"."""
    import torch

    shape = [int(s) for s in meta["input"]["shape"]]
    pre = meta["preprocessing"]
    sshape = stats_shape(shape, len(pre["mean"]), where)
    mean = torch.tensor(pre["mean"], dtype=torch.float32).reshape(sshape)
    std = torch.tensor(pre["std"], dtype=torch.float32).reshape(sshape)
    target = (meta.get("schema") or {}).get("target") or {}
    scale = (float(target["mean"]), float(target["std"])) if meta.get("task") == "regression" else None
    wrapped: nn.Module = _standardized_class()(model, mean, std, output == "probabilities", scale)
    return wrapped.eval()


def unstandardize(x: torch.Tensor, mean: Any, std: Any, shape: tuple[int, ...], where: str) -> torch.Tensor:
    """Standardised samples back to raw features, with the statistics given."""
    import torch

    sshape = stats_shape(shape, len(mean), where)
    m = torch.tensor(list(mean), dtype=torch.float32).reshape(sshape)
    s = torch.tensor(list(std), dtype=torch.float32).reshape(sshape)
    return x * s + m


def rebuild_module(meta: dict[str, Any], state: dict[str, Any], where: str) -> nn.Module:
    """The bare trained module (standardised input, logits out) from a description and its weights."""
    from core.config import ConfigError, from_dict
    from core.training.models import build_model

    try:
        model_cfg = from_dict({"model": meta["architecture"]}).model
        image_shape = meta["input"].get("image_shape")
        module = build_model(
            model_cfg,
            tuple(meta["input"]["shape"]),
            max(1, len(meta["classes"])),
            tuple(image_shape) if image_shape else None,
            tuple(int(c) for c in meta.get("categories") or ()),
            tuple(int(k) for k in meta.get("texts") or ()),
        )
    except (KeyError, TypeError, ConfigError) as exc:
        raise ModelFileError(f"{where}: its model description is unusable: {exc}") from None
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise ModelFileError(f"{where}: weights do not fit the described model: {first[:200]}") from None
    return module.eval()


def trained_state(model: nn.Module) -> dict[str, torch.Tensor]:
    # clones: safetensors refuses tensors sharing storage, torch.save would keep views' whole storages
    return {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}


def load_state_dict_file(path: Path) -> dict[str, Any]:
    """A ``.pt`` state dict, loaded with ``weights_only=True``: pickled code is refused, never run."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise ModelFileError(
            f"model: {path} holds pickled objects other than tensors and was refused (weights_only): {first[:160]}"
        ) from None
    except FileNotFoundError:
        raise ModelFileError(f"model: file not found: {path}") from None
    except Exception as exc:
        raise ModelFileError(f"model: {path} is not a readable state dict ({type(exc).__name__})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelFileError(f"model: {path} is not a state dict (a mapping of names to tensors)")
    return state


def torch_runner(module: Callable[[Any], Any]) -> Callable[[np.ndarray], np.ndarray]:
    """numpy in, numpy out, without gradients."""
    import torch

    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(x)).detach().numpy()

    return run
