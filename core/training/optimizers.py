"""The optimizer of a worker: torch's, over the trainable parameters, with its fused kernels where they run;
a pretrained backbone's parameters in a group of their own at ``optim.backbone_lr_mult`` times the rate."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from core.config import OptimConfig
from core.training.backbones import BackboneNet

FUSED_DEVICES = ("cpu", "cuda")  # where torch's fused SGD, Adam and AdamW kernels run


def make_optimizer(model: nn.Module | Iterable[nn.Parameter], cfg: OptimConfig, lr: float) -> torch.optim.Optimizer:
    """The configured optimizer over the trainable parameters, with torch's fused kernel where every parameter
    allows it: the same update rule, computed in one pass per parameter (faster steps on CPU:
    bench/optimizer_step.py). A pretrained backbone's parameters learn at ``optim.backbone_lr_mult`` times
    the rate (a group's ``lr_mult``, which :func:`set_lr` keeps)."""
    if isinstance(model, nn.Module):
        groups = param_groups(getattr(model, "module", model), cfg)  # a DDP wrapper's own module
    else:  # parameters given as they are
        groups = [{"params": list(model), "lr_mult": 1.0}]
    params = [p for g in groups for p in g["params"]]
    fused = bool(params) and all(p.is_floating_point() and p.device.type in FUSED_DEVICES for p in params)
    for g in groups:
        g["lr"] = lr * g["lr_mult"]
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, fused=fused)
    if cfg.name == "adam":
        return torch.optim.Adam(groups, lr=lr, weight_decay=cfg.weight_decay, fused=fused)
    return torch.optim.AdamW(groups, lr=lr, weight_decay=cfg.weight_decay, fused=fused)


def param_groups(model: nn.Module, cfg: OptimConfig) -> list[dict[str, Any]]:
    """The trainable parameters; a pretrained backbone's in a group of their own, after the head's."""
    if isinstance(model, BackboneNet):
        groups: list[dict[str, Any]] = [{"params": list(model.head.parameters()), "lr_mult": 1.0}]
        backbone = [p for p in model.backbone.parameters() if p.requires_grad]
        if backbone:
            groups.append({"params": backbone, "lr_mult": cfg.backbone_lr_mult})
        return groups
    return [{"params": [p for p in model.parameters() if p.requires_grad], "lr_mult": 1.0}]


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The run's rate, times each group's own share of it."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_mult", 1.0)
