"""A loaded model, whatever its format: raw features (numpy float32, batch first) in, predictions out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


class Predictor:
    """Raw features (numpy float32, batch first) in, class probabilities out."""

    def __init__(self, path: Path, meta: dict[str, Any], run: Callable[[np.ndarray], np.ndarray], output: str) -> None:
        self.path = path
        self.meta = meta
        self.output = output  # what ``run`` returns: "logits" or "probabilities"
        self._run = run

    @property
    def classes(self) -> list[str]:
        """Class names; a regression model's one output is named after its target."""
        return output_names(self.meta)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.meta["input"]["shape"])

    def raw(self, x: np.ndarray) -> np.ndarray:
        """The model's own output (logits or probabilities, see ``output``)."""
        return self._run(x)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities; for a regression model, its prediction in the target's units (one column)."""
        out = self._run(x)
        return softmax(out) if self.output == "logits" and self.meta.get("task") != "regression" else out


def output_names(meta: dict[str, Any]) -> list[str]:
    """A description's class names; a regression model's one output, named after its target."""
    return [str(c) for c in meta["classes"]] or [str((meta.get("output") or {}).get("name") or "prediction")]


def softmax(z: np.ndarray) -> np.ndarray:
    import numpy as np

    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
