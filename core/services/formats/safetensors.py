"""``.safetensors``: the weights, the description embedded in the header and in ``model.json`` beside them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ModelFileError, RunError
from core.services.formats.base import ModelFormat
from core.services.formats.description import META_KEY, SIDECAR, embedded, meta_or_sidecar, sidecar_entry
from core.services.formats.module import rebuild_module, standardized, torch_runner, trained_state
from core.services.formats.predictor import Predictor

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


class SafetensorsFormat(ModelFormat):
    name = "safetensors"
    suffix = ".safetensors"
    label = "safetensors: weights + model.json"
    reloads_as = "probabilities"

    def read_meta(self, path: Path) -> dict[str, Any]:
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="numpy") as fh:
                text = (fh.metadata() or {}).get(META_KEY)
        except Exception as exc:  # safetensors raises its own error types for a corrupt header
            raise ModelFileError(f"model: {path} is not a readable .safetensors file ({type(exc).__name__})") from None
        return meta_or_sidecar(text, path)

    def load(self, path: Path, threads: int = 0, meta: dict[str, Any] | None = None) -> Predictor:
        """Rebuild the module from the description (embedded, or ``meta`` e.g. from model.json) and the weights."""
        from safetensors.torch import load_file

        meta = meta or self.read_meta(path)
        try:
            state = load_file(str(path))
        except Exception as exc:
            raise ModelFileError(f"model: {path} is not a readable .safetensors file ({type(exc).__name__})") from None
        module = standardized(rebuild_module(meta, state, str(path)), meta, "probabilities", str(path))
        return Predictor(path, meta, torch_runner(module), "probabilities")

    def write(self, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
        from safetensors.torch import save_file

        save_file(trained_state(model), str(path), metadata={META_KEY: embedded(self, desc, "logits")})

    def reload(
        self, path: Path, desc: dict[str, Any], output: str, raw: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray | None, str]:
        meta = sidecar_entry(path)  # core's rebuild path: from the model.json beside the weights
        if meta is None:
            raise RunError(f"export: the {SIDECAR} beside {path.name} does not list it")
        return self.load(path, meta=meta).probabilities(raw.numpy()), None, "safetensors + model.json"


SAFETENSORS = SafetensorsFormat()
