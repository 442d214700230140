"""TensorBoard logs as Lightning's TensorBoardLogger writes them, made with tensorboardX (Lightning's own writer
when the ``tensorboard`` package is missing), so the suite needs no Lightning.

A ``LightningModule`` whose ``training_step`` logs ``self.log("train_loss", loss, on_step=True, on_epoch=True)``
and whose ``validation_step`` logs ``val_loss`` and ``val_acc``, trained by ``Trainer(log_every_n_steps=N)``,
leaves in ``lightning_logs/version_V/``: ``hp_metric`` (-1, the placeholder of ``default_hp_metric``) and the
hparams plugin's summaries at step 0 and an ``hparams.yaml``; every N batches ``train_loss_step`` and
``epoch`` (counted from 0) at the global step; at each epoch's end ``val_loss``, ``val_acc``, ``epoch``, then
``train_loss_epoch`` and ``epoch``, at the epoch's last global step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

T0 = 1_700_000_000.0  # the logs' first wall time


def train_loss(step: int) -> float:
    return 2.0 / (step + 1) + 0.1


def val_loss(epoch: int) -> float:
    return 1.0 / (epoch + 1) + 0.05


def val_acc(epoch: int) -> float:
    return 0.5 + 0.1 * epoch


@dataclass
class LightningLog:
    path: Path
    steps: list[int] = field(default_factory=list)  # where train_loss_step was logged
    epoch_ends: list[int] = field(default_factory=list)  # the global step of each epoch's end (its evaluation)


def lightning_log(
    root: Path, version: int = 0, epochs: int = 3, batches: int = 16, every: int = 5, extra: bool = True
) -> LightningLog:
    """``root/lightning_logs/version_<version>`` of a Lightning run of ``epochs`` epochs of ``batches`` batches
    logged every ``every`` steps; ``extra``: a ``grad_norm`` scalar and an image no curve shows."""
    import numpy as np
    from tensorboardX import SummaryWriter
    from tensorboardX.summary import hparams

    folder = root / "lightning_logs" / f"version_{version}"
    log = LightningLog(folder)
    writer = SummaryWriter(str(folder))
    try:
        writer.add_scalar("hp_metric", -1, 0, walltime=T0)
        exp, ssi, sei = hparams({"lr": 0.05, "hidden": 16, "optimizer": "sgd"}, {"hp_metric": -1})
        for summary in (exp, ssi, sei):
            writer.file_writer.add_summary(summary, 0, walltime=T0)  # as TensorBoardLogger.log_hyperparams does
        for step in range(epochs * batches):
            epoch = step // batches
            t = T0 + 0.01 * (step + 1)
            if (step + 1) % every == 0:
                writer.add_scalar("train_loss_step", train_loss(step), step, walltime=t)
                writer.add_scalar("epoch", epoch, step, walltime=t)
                log.steps.append(step)
                if extra:
                    writer.add_scalar("grad_norm", 1.0, step, walltime=t)
            if (step + 1) % batches == 0:
                writer.add_scalar("val_loss", val_loss(epoch), step, walltime=t + 0.001)
                writer.add_scalar("val_acc", val_acc(epoch), step, walltime=t + 0.001)
                writer.add_scalar("epoch", epoch, step, walltime=t + 0.001)
                writer.add_scalar("train_loss_epoch", train_loss(step) + 0.2, step, walltime=t + 0.002)
                writer.add_scalar("epoch", epoch, step, walltime=t + 0.002)
                log.epoch_ends.append(step)
        if extra:
            writer.add_image("samples", np.zeros((3, 4, 4), dtype=np.uint8), 0, walltime=T0)
    finally:
        writer.close()
    (folder / "hparams.yaml").write_text("lr: 0.05\nhidden: 16\noptimizer: sgd\n")
    return log
