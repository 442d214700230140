"""The LightningModule of bench/lightning_compare.py, in its own module so only Lightning runs import lightning."""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F

from core.config import Config, apply_overrides
from core.data import load_data
from core.training.models import build_model


class BenchModule(L.LightningModule):
    """The same MLP on the same data; module level so ddp_spawn can pickle it."""

    def __init__(self, overrides: list[str]) -> None:
        super().__init__()
        self.cfg: Config = apply_overrides(Config(), overrides)
        data = load_data(self.cfg.data, seed=self.cfg.train.seed, share=False)
        self.net = build_model(self.cfg.model, data.info.input_shape, data.info.num_classes)
        self.first: float | None = None
        self.sync = False

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self.first is None:
            self.first = time.time()

    def on_train_epoch_end(self) -> None:
        # logged metrics come back to the main process even under ddp_spawn
        self.log("bench_train_s", time.time() - (self.first or time.time()))

    def training_step(self, batch: Any, idx: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean(), sync_dist=self.sync)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.cfg.optim.lr, momentum=self.cfg.optim.momentum)
