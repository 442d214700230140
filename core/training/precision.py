"""How the training step computes: the forward pass's autocast, the backward pass, the optimizer step.

``parallel.precision`` picks one object per worker, so the step itself reads the
same for every precision::

    with precision.autocast():
        loss = loss_fn(net(xb), yb)
    precision.backward(loss)
    precision.step(optimizer)

``32`` is plain float32; ``bf16-mixed`` runs the forward pass under bfloat16
autocast; ``16-mixed`` (CUDA) under float16 autocast with a gradient scaler,
which scales the loss before the backward pass and unscales the gradients in
the step (skipping a step whose gradients overflowed).

Each object's ``state_dict()`` (empty for one that keeps none; the scaler's
scale and growth tracker for ``16-mixed``) travels in a checkpoint with the
optimizer's state, so a resumed run goes on with the scale it had reached.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager as ContextManager
from typing import Any, Protocol

import torch


class Precision(Protocol):
    skips_overflowing_steps: bool  # an infinite gradient skips the step (a scaler's signal, not a divergence)

    def autocast(self) -> ContextManager[object]:
        """The context the forward pass and the loss run in."""

    def backward(self, loss: torch.Tensor) -> None:
        """The gradients of ``loss``."""

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's step from those gradients."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to compute the same steps ({} when it keeps nothing)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state_dict()`` of an earlier run ({}: a fresh start)."""


class FullPrecision:
    """float32: no autocast, a plain backward pass and step."""

    skips_overflowing_steps = False

    def autocast(self) -> ContextManager[object]:
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the step keeps no state of its own."""


class MixedPrecision(FullPrecision):
    """The forward pass under autocast to ``dtype``; gradients and the step in float32."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        self.device_type = device.type
        self.dtype = dtype

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        return torch.autocast(self.device_type, dtype=self.dtype)


class ScaledMixedPrecision(MixedPrecision):
    """float16 autocast with a gradient scaler (float16 gradients underflow without one)."""

    skips_overflowing_steps = True  # an infinite gradient is the scaler's signal, not a divergence

    def __init__(self, device: torch.device) -> None:
        super().__init__(device, torch.float16)
        self.scaler = torch.amp.GradScaler(device.type)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        """The scaler's scale, growth and backoff factors, growth interval and growth tracker."""
        return dict(self.scaler.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:  # {}: a checkpoint of a step that kept no scaler; this one starts fresh
            self.scaler.load_state_dict(state)


def precision_for(precision: str, device: torch.device) -> Precision:
    """The object for ``parallel.precision`` on ``device``."""
    if precision == "bf16-mixed":
        return MixedPrecision(device, torch.bfloat16)
    if precision == "16-mixed":
        return ScaledMixedPrecision(device)
    return FullPrecision()
