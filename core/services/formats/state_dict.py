"""``.pt`` state dict: ``torch.save`` of the weights, loaded with ``weights_only=True`` into what ``model.json`` describes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.services.formats.base import ModelFormat
from core.services.formats.description import bare_state_dict_error, sidecar_entry
from core.services.formats.module import load_state_dict_file, rebuild_module, standardized, torch_runner, trained_state
from core.services.formats.predictor import Predictor

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


class StateDictFormat(ModelFormat):
    name = "state-dict"
    suffix = ".pt"
    label = "PyTorch state dict (.pt)"
    reloads_as = "logits"

    def read_meta(self, path: Path) -> dict[str, Any]:
        meta = sidecar_entry(path)
        if meta is None:
            raise bare_state_dict_error(path)
        return meta

    def load(self, path: Path, threads: int = 0, meta: dict[str, Any] | None = None) -> Predictor:
        meta = meta or self.read_meta(path)
        state = load_state_dict_file(path)
        module = standardized(rebuild_module(meta, state, str(path)), meta, "probabilities", str(path))
        return Predictor(path, meta, torch_runner(module), "probabilities")

    def write(self, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
        import torch

        torch.save(trained_state(model), path)

    def reload(
        self, path: Path, desc: dict[str, Any], output: str, raw: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray | None, str]:
        import torch

        rebuilt = rebuild_module(desc, load_state_dict_file(path), str(path))
        with torch.no_grad():
            return standardized(rebuilt, desc, "logits", str(path))(raw).numpy(), None, "torch.load(weights_only=True)"


STATE_DICT = StateDictFormat()
