"""Image data reaches every model as (C, H, W), whatever the source; tables stay flat.

The custom model here is the network of pytorch/examples' mnist_hogwild
(conv 1->10, max-pool, conv 10->20, max-pool, two linear layers), padded for
inputs smaller than 28x28: it has no reshaping code of its own.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from core.config import DataConfig, ModelConfig
from core.data import load_data, make_batches
from core.training.models import build_model

HOGWILD_NET = """
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, input_shape, num_classes):
        super().__init__()
        c, h, w = input_shape  # a conv network: it needs (C, H, W), not a flat vector
        pad = 0 if min(h, w) >= 28 else 2
        self.conv1 = nn.Conv2d(c, 10, kernel_size=5, padding=pad)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5, padding=pad)
        self.conv2_drop = nn.Dropout2d()
        side = lambda s: ((s + 2 * pad - 4) // 2 + 2 * pad - 4) // 2
        self.flat = 20 * side(h) * side(w)
        self.fc1 = nn.Linear(self.flat, 50)
        self.fc2 = nn.Linear(50, num_classes)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, self.flat)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        return self.fc2(x)


def make(input_shape, num_classes):
    return Net(input_shape, num_classes)
"""


@pytest.fixture
def hogwild_kind(tmp_path: Path) -> str:
    path = tmp_path / "hogwild_net.py"
    path.write_text(textwrap.dedent(HOGWILD_NET))
    return f"custom:{path}:make"


def _mnist_like_npz(path: Path, n: int = 80) -> Path:
    rng = np.random.default_rng(0)
    y = np.arange(n) % 4
    x = rng.uniform(0, 1, (n, 1, 28, 28)).astype(np.float32)
    x[:, 0, 4:10, 4:10] += y[:, None, None] * 0.5  # learnable: a bright square whose brightness is the class
    np.savez(path, x=x, y=y)
    return path


def _images(root: Path) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls, level in (("dark", 40), ("light", 200)):
        (root / cls).mkdir(parents=True)
        for i in range(6):
            Image.fromarray(np.clip(rng.normal(level, 20, (12, 12)), 0, 255).astype(np.uint8)).save(
                root / cls / f"{i}.png"
            )
    return root


@pytest.mark.parametrize(
    "source, shape",
    [
        ("npz", (1, 28, 28)),
        ("builtin:digits", (1, 8, 8)),
        ("images", (1, 12, 12)),
    ],
)
def test_custom_conv_network_gets_c_h_w(
    tmp_path: Path, hogwild_kind: str, source: str, shape: tuple[int, int, int]
) -> None:
    if source == "npz":
        source = f"npz:{_mnist_like_npz(tmp_path / 'mnist.npz')}"
    elif source == "images":
        source = f"images:{_images(tmp_path / 'imgs')}"
    data = load_data(DataConfig(source=source), share=False)
    assert data.info.input_shape == data.info.image_shape == shape
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(kind=hogwild_kind), data.info.input_shape, data.info.num_classes, data.info.image_shape
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    batches = make_batches(data.train, data.info, 8, loader_workers=0)
    xb, yb = next(iter(batches.epoch(torch.arange(len(data.train)))))
    assert tuple(xb.shape) == (8, *shape)
    out = model(xb)
    assert tuple(out.shape) == (8, data.info.num_classes)
    torch.nn.functional.cross_entropy(out, yb).backward()
    opt.step()


def test_tables_stay_flat() -> None:
    data = load_data(DataConfig(source="builtin:iris"), share=False)
    assert data.info.input_shape == (4,) and data.info.image_shape is None
    assert tuple(data.train.x.shape[1:]) == (4,)


def test_builtin_models_take_the_image_shape() -> None:
    data = load_data(DataConfig(source="builtin:digits"), share=False)
    x = data.val.x[:5]
    for kind in ("linear", "mlp", "cnn"):
        model = build_model(ModelConfig(kind=kind), data.info.input_shape, 10, data.info.image_shape)
        assert tuple(model(x).shape) == (5, 10)
    old = build_model(ModelConfig(kind="cnn"), (64,), 10, (1, 8, 8))  # a checkpoint from when digits were flat
    assert tuple(old(x.reshape(5, 64)).shape) == (5, 10)


def test_custom_conv_network_exports_and_predicts(tmp_path: Path, hogwild_kind: str) -> None:
    from core.services.export import export_run
    from core.services.predict import predict
    from tests.trained_run import make_run

    npz = _mnist_like_npz(tmp_path / "mnist.npz")
    run_dir = make_run(tmp_path / "runs", source=f"npz:{npz}", kind=hogwild_kind, steps=5)
    (tmp_path / "exports").mkdir()
    want = None
    for fmt in ("safetensors", "onnx"):
        result = export_run(run_dir, fmt, tmp_path / "exports")
        assert result.max_abs_diff <= 1e-4
        got = predict(result.path, npz, workers=1)
        assert got.probs.shape == (80, 4)
        if want is None:
            want = got.probs
        assert np.abs(got.probs - want).max() <= 1e-4
