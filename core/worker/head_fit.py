"""A head on cached features, fitted by full-batch L-BFGS in the worker's loop (``model.head_fit = "lbfgs"``):
the part of :class:`~core.worker.trainer.Trainer` that runs instead of its epochs of batches, with the same
records (a step an iteration, an evaluation an epoch), control words and checkpoints."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from torch import nn

from core.config import OptimConfig, TrainConfig
from core.data import FeatureSplit
from core.training.features import MAX_ITERATIONS, HeadFit, default_l2
from core.worker.channels import EpochRestart

if TYPE_CHECKING:
    import torch

    from core.config import Config
    from core.data import PreparedData
    from core.strategies.base import Strategy
    from core.training.losses import TaskLoss
    from core.worker.channels import RecordSender
    from core.worker.spec import WorkerSpec


class HeadFitting:
    """The fit, as the trainer's own methods (they read and move its counters, as an epoch of batches does)."""

    if TYPE_CHECKING:  # the trainer's, which the fit reads and moves
        config: Config
        strategy: Strategy
        spec: WorkerSpec
        data: PreparedData
        net: nn.Module
        device: torch.device
        loss_fn: TaskLoss
        out: RecordSender
        epoch: int
        batch: int
        offset: int
        step: int
        samples: int
        epochs_done: int
        _loss_acc: float
        _n_acc: int

        def _control_word(self) -> int: ...
        def _control(self, word: int) -> None: ...
        def _emit_step(self, force: bool = False, final: bool = False) -> None: ...
        def publish_weights(self) -> None: ...
        def _evaluate(self, epoch: int) -> None: ...

    def fits_head(self) -> bool:
        """Whether the head is fitted by full-batch L-BFGS on cached features instead of trained by batches."""
        return (
            self.config.model.head_fit == "lbfgs"
            and self.strategy.fits_head
            and isinstance(self.data.train, FeatureSplit)
            and isinstance(getattr(self.net, "head", None), nn.Linear)
        )

    def _fit_head(self) -> None:
        """Fit the head (:class:`~core.training.features.HeadFit`), its iterations spread over ``train.epochs`` with an
        evaluation after each share, to convergence or the budget; the epochs left then have nothing to do.

        Rank 0 fits the one shared head; another worker would only fight it over the same optimum.
        """
        if self.spec.rank != 0:
            self.epoch = self.config.train.epochs + 1
            return
        train = self.data.train
        assert isinstance(train, FeatureSplit)
        x, y = train.x.to(self.device), train.y.to(self.device)
        n = len(y)
        decay = self.config.optim.weight_decay
        l2 = decay if decay > 0 else default_l2(n)
        fit = HeadFit(self.net.head, x, y, self.loss_fn, l2)  # type: ignore[arg-type]  # an nn.Linear (fits_head)
        per_epoch = -(-MAX_ITERATIONS // self.config.train.epochs)
        t0 = time.perf_counter()
        self.net.train()
        while self.epoch <= self.config.train.epochs and not fit.converged:
            self.batch = 0
            while self.batch < per_epoch:
                word = self._control_word()
                if word:
                    try:
                        self._control(word)
                    except EpochRestart:  # a new batch size: the fit takes every sample at once anyway
                        pass
                loss = fit.iterate()
                if loss is None:
                    break
                self.batch += 1
                self.step += 1
                self.samples += n
                self._loss_acc += loss
                self._n_acc += 1
                self._emit_step(force=True)  # one record an iteration: the fit's curve, not a dot
            epoch = self.epoch
            self.epochs_done = epoch
            self.epoch, self.batch, self.offset = epoch + 1, 0, 0
            self.publish_weights()
            self._evaluate(epoch)
        self.out.log("info", self._fit_line(fit, n, l2, decay > 0, time.perf_counter() - t0, per_epoch))
        self.epoch = max(self.epoch, self.config.train.epochs + 1)

    def _fit_line(self, fit: HeadFit, n: int, l2: float, decay: bool, seconds: float, per_epoch: int) -> str:
        """The log's account of the fit, and of the settings it did not use."""
        penalty = f"L2 {l2:.3g} ({'optim.weight_decay' if decay else '1/n, as LogisticRegression(C=1)'})"
        line = f"head fitted by full-batch L-BFGS on {n:,} cached features: {fit.iterations} iterations"
        line += f", {seconds:.2f} s, {penalty}"
        if not fit.converged:
            line += f"; not converged within {per_epoch} iterations an epoch (more train.epochs give it more)"
        optim, train = self.config.optim, self.config.train
        unused = [f"optim.{k}" for k in ("name", "lr", "momentum") if getattr(optim, k) != getattr(OptimConfig(), k)]
        unused += ["train.batch_size"] if train.batch_size != TrainConfig().batch_size else []
        if unused:
            them = "them" if len(unused) > 1 else "it"
            line += f'; {", ".join(unused)} not used: model.head_fit = "optimizer" trains the head by {them}'
        return line
