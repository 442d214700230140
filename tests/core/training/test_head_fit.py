"""The head fitted on cached features reaches scikit-learn's optimum: a logistic regression, and for one output
a ridge regression."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression, Ridge

from core.training.features import HeadFit, default_l2
from core.training.losses import TaskLoss


def _fit(x: np.ndarray, y: torch.Tensor, outputs: int, loss: TaskLoss, l2: float) -> tuple[torch.nn.Linear, HeadFit]:
    torch.manual_seed(0)
    head = torch.nn.Linear(x.shape[1], outputs)
    fit = HeadFit(head, torch.from_numpy(x), y, loss, l2)
    while fit.iterate() is not None:
        assert fit.iterations < 1000
    return head, fit


def test_a_classifier_head_reaches_the_logistic_regression_objective() -> None:
    rng = np.random.default_rng(0)
    classes, dim = 5, 64
    centres = rng.gamma(0.5, 1.0, (classes, dim))
    y = np.repeat(np.arange(classes), 8)
    x = (np.maximum(0.0, centres[y] + rng.normal(0.0, 1.5, (len(y), dim))) * 3.0).astype(np.float32)
    l2 = default_l2(len(y))
    head, fit = _fit(x, torch.from_numpy(y), classes, TaskLoss("classification"), l2)
    assert fit.converged
    ref = LogisticRegression(max_iter=5000, tol=1e-8).fit(x, y)  # C = 1: l2 = 1/n on the mean loss

    def objective(w: torch.Tensor, b: torch.Tensor) -> float:
        out = torch.from_numpy(x).double() @ w.double().T + b.double()
        ce = torch.nn.functional.cross_entropy(out, torch.from_numpy(y))
        return float(ce + 0.5 * l2 * w.double().pow(2).sum())

    ours = objective(head.weight.detach(), head.bias.detach())
    theirs = objective(torch.from_numpy(ref.coef_), torch.from_numpy(ref.intercept_))
    assert ours <= theirs + 1e-6, (ours, theirs)
    assert head.weight.dtype == torch.float32  # the head stays as the model has it


def test_a_regression_head_is_a_ridge_regression() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 2.0, (60, 12)).astype(np.float32)
    target = x @ rng.normal(0.0, 1.0, 12) + rng.normal(0.0, 0.5, 60)
    l2 = default_l2(len(x))
    head, fit = _fit(x, torch.from_numpy(target).float(), 1, TaskLoss("regression", "mse"), l2)
    assert fit.converged
    # mean squared error + l2/2 |w|^2 is, times n, scikit-learn's Ridge with alpha = n * l2 / 2
    ref = Ridge(alpha=len(x) * l2 / 2).fit(x, target)
    assert np.allclose(head.weight.detach().numpy().ravel(), ref.coef_, atol=1e-4)
    assert abs(float(head.bias.detach()) - float(ref.intercept_)) < 1e-4
