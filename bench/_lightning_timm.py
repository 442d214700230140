"""The peer of bench/backbones.py: what a Lightning user writes to train a linear head on a frozen timm backbone.

    python bench/_lightning_timm.py DIR WEIGHTS ARCH EPOCHS

torchvision's ImageFolder with timm's eval transform (resize, centre crop, normalise), the backbone frozen in
eval mode, a linear head, Adam, Lightning's Trainer on the CPU; the same 80/20 split and epochs as the engine.
Prints the validation accuracy of the last epoch.
"""

from __future__ import annotations

import sys

import lightning as L
import timm
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torchvision import datasets


class Head(L.LightningModule):
    def __init__(self, arch: str, weights: str, classes: int) -> None:
        super().__init__()
        self.backbone = timm.create_model(arch, pretrained=False, num_classes=0)
        state = {k: v for k, v in load_file(weights).items() if k in self.backbone.state_dict()}
        self.backbone.load_state_dict(state)
        self.backbone.requires_grad_(False)
        self.head = torch.nn.Linear(self.backbone.num_features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.backbone.eval()
        with torch.no_grad():
            f = self.backbone(x)
        return self.head(f)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> None:
        x, y = batch
        self.log("val_acc", (self(x).argmax(1) == y).float().mean(), prog_bar=False)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.head.parameters(), lr=1e-3)


def main() -> None:
    root, weights, arch, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    cfg = timm.data.resolve_data_config({}, model=timm.create_model(arch, pretrained=False))
    tf = timm.data.create_transform(**cfg)
    data = datasets.ImageFolder(root, transform=tf)
    n_val = len(data) // 5
    train, val = torch.utils.data.random_split(data, [len(data) - n_val, n_val], torch.Generator().manual_seed(0))
    kw = {"batch_size": 64, "num_workers": 2, "persistent_workers": True}
    model = Head(arch, weights, len(data.classes))
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, torch.utils.data.DataLoader(train, shuffle=True, **kw), torch.utils.data.DataLoader(val, **kw))
    print(float(trainer.callback_metrics["val_acc"]))


if __name__ == "__main__":
    main()
