"""A finished run directory with a checkpoint, trained in-process: shared by core and app tests."""

from __future__ import annotations

from pathlib import Path

import torch

from core.config import Config, to_dict, to_toml
from core.data import full_tensors, load_data
from core.runfiles.writing import atomic_write_json, atomic_write_text, make_run_dir
from core.training.checkpoint import save_checkpoint
from core.training.models import build_model


def make_run(
    root: Path,
    source: str = "builtin:digits",
    kind: str = "mlp",
    steps: int = 60,
    hidden: tuple[int, ...] = (32,),
    image_size: int = 0,
) -> Path:
    """A finished run directory with a checkpoint, trained in this process (no workers: quick)."""
    cfg = Config()
    cfg = cfg.replace("data", source=source, image_size=image_size).replace(
        "model", kind=kind, hidden=hidden, channels=(4,)
    )
    data = load_data(cfg.data, seed=cfg.train.seed, share=False)
    info = data.info
    torch.manual_seed(0)
    model = build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape)
    x, y = full_tensors(data.train, info)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, len(y), (64,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    run_dir = make_run_dir(root, "test")
    atomic_write_text(run_dir / "config.toml", to_toml(cfg))
    save_checkpoint(
        run_dir / "checkpoints" / "last.pt",
        {
            "config": to_dict(cfg),
            "info": info.as_dict(),
            "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "optimizers": None,
            "epoch": 1,
            "steps": steps,
            "best_worker": 0,
            "worker_lrs": [cfg.optim.lr],
        },
    )
    atomic_write_json(run_dir / "summary.json", {"status": "finished", "final": {}, "error": None})
    return run_dir


def add_best(run_dir: Path, epoch: int = 1, value: float = 0.25, monitor: str = "val_loss") -> Path:
    """checkpoints/best.pt beside last.pt, with weights of its own (last's, scaled) so the two differ."""
    from core.training.checkpoint import load_checkpoint

    data = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    model = {k: (v * 0.5 if v.is_floating_point() else v.clone()) for k, v in data["model"].items()}
    path = run_dir / "checkpoints" / "best.pt"
    save_checkpoint(
        path,
        {
            "config": data["config"],
            "info": data["info"],
            "model": model,
            "models": None,
            "epoch": epoch,
            "steps": data["steps"],
            "best_worker": 0,
            "monitor": monitor,
            "value": value,
        },
    )
    return path


def table_run(csv: Path, runs_dir: Path, epochs: int = 2) -> Path:
    """A finished run of a model trained on the table in ``csv`` (its schema fitted), one process: quick."""
    from core.config import apply_overrides
    from core.session import Session

    cfg = apply_overrides(Config(), [f'data.source="csv:{csv}"', "parallel.strategy=single", f"train.epochs={epochs}"])
    session = Session(cfg, runs_dir=runs_dir)
    session.start()
    assert session.wait(180) == "finished" and session.run_dir is not None
    return session.run_dir


def grey_image_folder(root: Path, per_class: int, seed: int = 0) -> Path:
    """Two class folders ("dark", "light") of 8x8 grey PNGs, told apart by their brightness."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for cls, level in (("dark", 40), ("light", 200)):
        (root / cls).mkdir(parents=True)
        for i in range(per_class):
            arr = np.clip(rng.normal(level, 30, (8, 8)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(root / cls / f"{i:02d}.png")
    return root


def noise_photos(root: Path, per_class: int, classes: int = 2) -> Path:
    """Class folders ("class0", ...) of 24x24 RGB noise PNGs: a photo folder for a backbone to run over."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray((rng.random((24, 24, 3)) * 255).astype(np.uint8)).save(root / f"class{c}" / f"{i}.png")
    return root
