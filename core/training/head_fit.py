"""A linear head fitted on a frozen backbone's cached features by full-batch L-BFGS (``model.head_fit = "lbfgs"``).

On cached features the head's problem is convex and small: a multinomial logistic regression (the run's
cross-entropy, class weights included) or, for one output, a penalised least-squares fit (the run's
regression loss). The whole training split is one batch and each iteration costs a pass over it, so the fit
reaches the optimum in tens to a few hundred iterations, where minibatch SGD at a fixed rate stops short of it.

The penalty is scikit-learn's ``LogisticRegression`` default, C = 1: its objective, ``0.5 |W|^2 + C * sum of
losses``, is the mean loss plus ``l2 / 2 * |W|^2`` with ``l2 = 1 / (C * n)``; the bias is not penalised. The
head stays a plain ``nn.Linear`` on the raw features (nothing is standardised that an export would not do),
so every face of the trained model is as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

MAX_ITERATIONS = 1000  # a run's budget; a few-shot head converges in far fewer
TOLERANCE_GRAD = 1e-6  # on the largest gradient of the mean objective (scikit-learn stops at 1e-4)
TOLERANCE_CHANGE = 1e-9  # the largest change of a weight by a step
DOUBLE_LIMIT = 50_000_000  # feature values (400 MB in float64) up to which the fit is in float64
HISTORY = 20  # curvature pairs L-BFGS keeps
LINE_SEARCH_EVALS = 30  # objective evaluations one iteration may make (torch's default is 1.25 per iteration)


def default_l2(n_train: int) -> float:
    """scikit-learn's C = 1 on the mean loss."""
    return 1.0 / max(1, n_train)


class HeadFit:
    """L-BFGS on ``head`` over all of ``(x, y)`` at once, one iteration per :meth:`iterate`.

    It works on a float64 copy of the head and of the features (when they fit in :data:`DOUBLE_LIMIT`): near
    the optimum a float32 objective changes by less than its own rounding and the line search stops short.
    Each iteration's weights are copied into ``head``.
    """

    def __init__(
        self,
        head: nn.Linear,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        l2: float,
    ) -> None:
        dtype = torch.float64 if x.numel() <= DOUBLE_LIMIT and x.device.type != "mps" else head.weight.dtype
        self.head, self.x, self.y, self.loss_fn, self.l2 = head, x.to(dtype), y, loss_fn, l2
        self.weight = head.weight.detach().to(dtype).clone().requires_grad_(True)
        self.bias = head.bias.detach().to(dtype).clone().requires_grad_(True)
        # line search by the strong Wolfe conditions: no rate to choose, whatever the features' scale
        self.optimizer = torch.optim.LBFGS(
            [self.weight, self.bias],
            lr=1.0,
            max_iter=1,
            max_eval=LINE_SEARCH_EVALS,
            history_size=HISTORY,
            tolerance_grad=TOLERANCE_GRAD,
            tolerance_change=TOLERANCE_CHANGE,
            line_search_fn="strong_wolfe",
        )
        self.iterations = 0
        self.converged = False
        self._start_loss = math.nan
        self._first = False

    def _closure(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=False)
        out = torch.nn.functional.linear(self.x, self.weight, self.bias)
        loss = self.loss_fn(out, self.y)
        objective = loss + 0.5 * self.l2 * self.weight.pow(2).sum()
        objective.backward()
        if self._first:  # the loss of the weights the iteration starts from, as a training step reports it
            self._start_loss = float(loss.detach())
            self._first = False
        return objective

    def iterate(self) -> float | None:
        """One iteration; the data loss of the weights it started from, or None once converged (no step)."""
        if self.converged:
            return None
        state = self.optimizer.state[self.weight]
        iterations, evaluations = int(state.get("n_iter", 0)), int(state.get("func_evals", 0))
        self._first = True
        with torch.enable_grad():
            objective = float(self.optimizer.step(self._closure).detach())
        # no iteration (the gradient is within tolerance), no line search (the direction no longer descends at
        # this precision) or a step that moved nothing: the optimum, as near as the arithmetic gets
        stepped = int(state.get("n_iter", 0)) > iterations and int(state.get("func_evals", 0)) > evaluations + 1
        if not stepped or not math.isfinite(objective) or self._stalled(state):
            self.converged = True
            return None
        with torch.no_grad():
            self.head.weight.copy_(self.weight)
            self.head.bias.copy_(self.bias)
        self.iterations += 1
        return self._start_loss

    @staticmethod
    def _stalled(state: dict[str, object]) -> bool:
        """The step just taken moved no weight by more than the tolerance (torch's own test, kept here
        because each call makes one iteration)."""
        d, t = state.get("d"), state.get("t")
        if not isinstance(d, torch.Tensor) or not isinstance(t, float | int):
            return False
        return bool(d.mul(t).abs().max() <= TOLERANCE_CHANGE)
