from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from core.config import DataConfig, ModelConfig
from core.data import describe_source, load_data, stratified_split
from core.errors import DataError, ModelError
from core.training.models import build_model, count_parameters


@pytest.mark.parametrize(
    "name, n, classes", [("digits", 1797, 10), ("iris", 150, 3), ("wine", 178, 3), ("breast_cancer", 569, 2)]
)
def test_builtin_datasets(name: str, n: int, classes: int) -> None:
    data = load_data(DataConfig(source=f"builtin:{name}"))
    assert data.info.n_samples == n
    assert data.info.num_classes == classes
    assert data.info.n_train + data.info.n_val == n
    assert data.train.x.is_shared() and data.val.y.is_shared()
    # standardised with training statistics
    assert abs(float(data.train.x.mean())) < 1e-3


def test_synthetic_is_sized_by_parameters() -> None:
    data = load_data(DataConfig(source="builtin:synthetic?n=500&features=7&classes=4"))
    assert data.info.n_samples == 500 and data.info.input_shape == (7,) and data.info.num_classes == 4
    with pytest.raises(DataError, match="unknown parameter 'size'"):
        load_data(DataConfig(source="builtin:synthetic?size=3"))


def test_split_is_seeded_and_stratified() -> None:
    y = np.repeat(np.arange(4), 50)
    a = stratified_split(y, 0.2, seed=1)
    b = stratified_split(y, 0.2, seed=1)
    c = stratified_split(y, 0.2, seed=2)
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert not np.array_equal(a[1], c[1])
    assert np.bincount(y[a[1]]).tolist() == [10, 10, 10, 10]


def _write_csv(path: Path, text: str) -> str:
    path.write_text(text)
    return f"csv:{path}"


def test_csv_with_class_names(tmp_path: Path) -> None:
    rows = ["a,b,label"] + [f"{i},{i % 3},{'cat' if i % 2 else 'dog'}" for i in range(40)]
    src = _write_csv(tmp_path / "d.csv", "\n".join(rows) + "\n")
    data = load_data(DataConfig(source=src))
    assert data.info.class_names == ("cat", "dog")
    assert data.info.feature_names == ("a", "b")


@pytest.mark.parametrize(
    "text, message",
    [
        ("a,label\n1,x\nfoo,y\n", "column 'a' is not numeric (line 3: 'foo')"),
        ("a,b\n1,2\n3,4\n", "target column 'label' not found"),
        ("", "is empty"),
        ("a,label\n", "no data rows"),
        ("a,label\n1,x\n2\n", "line 3 has 1 fields, the header has 2"),
        ("a,label\n1,x\n2,x\n", "only one class"),
        ("a,label\n1,x\nnan,y\n", "non-finite value"),
    ],
)
def test_csv_errors_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    src = _write_csv(tmp_path / "bad.csv", text)
    with pytest.raises(DataError) as err:
        load_data(DataConfig(source=src))
    assert message in str(err.value)
    assert "bad.csv" in str(err.value)


def test_npz_source(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(60, 1, 3, 3)).astype(np.float32), y=np.arange(60) % 3)
    data = load_data(DataConfig(source=f"npz:{tmp_path / 'd.npz'}"))
    assert data.info.input_shape == data.info.image_shape == (1, 3, 3)  # images reach models as (C, H, W)
    assert tuple(data.train.x.shape[1:]) == (1, 3, 3)
    assert data.info.class_names == ("0", "1", "2")
    with pytest.raises(DataError, match="needs arrays 'x' and 'y'"):
        np.savez(tmp_path / "e.npz", a=np.zeros(3))
        load_data(DataConfig(source=f"npz:{tmp_path / 'e.npz'}"))


def _make_images(root: Path, per_class: int = 6, size: int = 12) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls, level in (("dark", 40), ("light", 200)):
        (root / cls).mkdir(parents=True)
        for i in range(per_class):
            arr = np.clip(rng.normal(level, 20, size=(size, size, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(root / cls / f"{i}.png")


def test_image_folder_loads_lazily(tmp_path: Path) -> None:
    from core.data import make_batches

    _make_images(tmp_path / "imgs")
    data = load_data(DataConfig(source=f"images:{tmp_path / 'imgs'}", image_size=8))
    assert data.info.image_shape == (3, 8, 8)
    assert data.info.class_names == ("dark", "light")
    batches = make_batches(data.train, data.info, 4, loader_workers=0)
    xb, yb = next(iter(batches.epoch(torch.arange(len(data.train)))))
    assert xb.shape == (4, 3, 8, 8) and yb.dtype == torch.long
    info = describe_source(f"images:{tmp_path / 'imgs'}")
    assert info.preview_images and info.summary.startswith("12 samples, 12x12 images (RGB), 2 classes")


def test_image_folder_errors(tmp_path: Path) -> None:
    (tmp_path / "one" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match="one sub-folder per class"):
        load_data(DataConfig(source=f"images:{tmp_path / 'one'}"))
    with pytest.raises(DataError, match="folder not found"):
        load_data(DataConfig(source=f"images:{tmp_path / 'none'}"))


@pytest.mark.parametrize("kind", ["linear", "mlp", "cnn"])
def test_models_build_for_digits(kind: str) -> None:
    model = build_model(ModelConfig(kind=kind), (64,), 10, (1, 8, 8))
    assert model(torch.zeros(5, 64)).shape == (5, 10)
    assert count_parameters(model) > 0


def test_cnn_needs_images() -> None:
    with pytest.raises(ModelError, match="needs image-shaped data"):
        build_model(ModelConfig(kind="cnn"), (4,), 3)


def test_custom_model(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import torch.nn as nn, math\n"
        "def make(shape, n):\n    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), n))\n"
        "def wrong(shape, n):\n    return nn.Linear(math.prod(shape), n + 1)\n"
        "def notmodule(shape, n):\n    return 3\n"
    )
    m = build_model(ModelConfig(kind=f"custom:{tmp_path / 'm.py'}:make"), (4,), 3)
    assert m(torch.zeros(2, 4)).shape == (2, 3)
    with pytest.raises(ModelError, match=r"output must have shape \(batch, 3\)"):
        build_model(ModelConfig(kind=f"custom:{tmp_path / 'm.py'}:wrong"), (4,), 3)
    with pytest.raises(ModelError, match="must return a torch.nn.Module, returned int"):
        build_model(ModelConfig(kind=f"custom:{tmp_path / 'm.py'}:notmodule"), (4,), 3)
    with pytest.raises(ModelError, match="has no function 'nope'"):
        build_model(ModelConfig(kind=f"custom:{tmp_path / 'm.py'}:nope"), (4,), 3)
    (tmp_path / "s.py").write_text("def f(:\n")
    with pytest.raises(ModelError, match="syntax error"):
        build_model(ModelConfig(kind=f"custom:{tmp_path / 's.py'}:f"), (4,), 3)


def test_split_keeps_lone_samples_and_small_classes() -> None:
    y = np.array([0] * 10 + [1] * 4 + [2])  # class 2: one sample
    train, val = stratified_split(y, 0.2, seed=0)
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(15))
    assert 14 in train  # a lone sample trains unless val_fraction rounds to 1
    assert np.bincount(y[val]).tolist() == [2, 1] and np.bincount(y[train]).tolist() == [8, 3, 1]
    _, val9 = stratified_split(y, 0.9, seed=0)
    assert 14 in val9 and np.bincount(y[val9], minlength=3).tolist() == [9, 3, 1]
    everything, none = stratified_split(y, 0.0, seed=0)
    assert len(none) == 0 and len(everything) == 15
    three = np.repeat(np.arange(3), 5)
    _, tiny = stratified_split(three, 0.01, seed=0)
    assert np.bincount(three[tiny]).tolist() == [1, 1, 1]  # at least one per class, as sklearn alone refuses
