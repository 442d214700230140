"""Evaluating a past run: its checkpoint (last or best) on its validation split, and its mistakes' images.

``evaluate_run`` rebuilds the split with ``core.services.data.run_data(cfg)``:
it is seeded, so it is the split the run validated on. The evaluation itself, and
where it is kept (eval.json, summary.json's figures), is the engine's
``core.training.validation``, which the run's own end-of-run evaluation uses too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import RunError
from core.runfiles.layout import RunDir
from core.training.scores import classification_scores as metrics  # noqa: F401 - the one computation of the figures
from core.training.validation import (  # noqa: F401 - what a run's evaluation is, asked for here too
    EVAL_FILE,
    attach_evaluation,
    compact,
    evaluate_split,
    load_evaluation,
    predict_probs,
    report,
    save_evaluation,
)

if TYPE_CHECKING:
    import numpy as np

    from core.data import PreparedData
    from core.readers.images import ImagePrep


def _check_same_data(data: PreparedData, info: dict[str, Any], run_dir: Path) -> None:
    """The data must still be what the run trained on, or the "same split" is another one."""
    import numpy as np

    now = data.info
    same = (
        list(now.class_names) == [str(c) for c in info["class_names"]]
        and list(now.input_shape) == list(info["input_shape"])
        and np.allclose(now.mean, info["mean"], rtol=1e-4, atol=1e-5)
        and np.allclose(now.std, info["std"], rtol=1e-4, atol=1e-5)
    )
    if not same:
        raise RunError(
            f"evaluate: {run_dir}: the data source has changed since the run (classes, features "
            "or statistics differ), so its validation split cannot be rebuilt"
        )


def evaluate_run(run_dir: Path, write: bool = True, checkpoint: str = "last") -> dict[str, Any]:
    """Evaluate a past run's checkpoint (last or best) on its validation split; write eval.json and summary.json."""
    from core.config import from_dict
    from core.services.data import run_data
    from core.training.checkpoint import checkpoint_file, load_checkpoint, model_from_checkpoint

    run_dir = Path(run_dir).expanduser()
    if not run_dir.is_dir():
        raise RunError(f"evaluate: run directory not found: {run_dir}")
    ckpt = load_checkpoint(checkpoint_file(run_dir, checkpoint, "evaluate"))
    model = model_from_checkpoint(ckpt, where=f"evaluate: {run_dir}")
    cfg = from_dict(ckpt["config"])
    data = run_data(cfg, ckpt["info"], run_dir)
    _check_same_data(data, ckpt["info"], run_dir)
    full = evaluate_split(model, data)
    full["checkpoint"] = {"which": checkpoint, "epoch": ckpt.get("epoch"), "steps": ckpt.get("steps")}
    if write:
        save_evaluation(run_dir, full)
    return full


# ----------------------------------------------------------------------------- images of the mistakes (for the GUI)


def misclassified_images(run_dir: Path, full: dict[str, Any], limit: int = 48) -> list[tuple[np.ndarray, str]]:
    """(uint8 HxW or HxWx3 image, caption) for the first misclassified samples; [] for non-image data."""
    import numpy as np

    from core.config import from_dict
    from core.data import ImageSplit
    from core.readers.images import prep_of
    from core.services.data import run_data
    from core.training.checkpoint import load_checkpoint

    items = full.get("misclassified", [])[:limit]
    if not items:
        return []
    ckpt = load_checkpoint(RunDir(run_dir).last)
    info = ckpt["info"]
    if not info.get("image_shape"):
        return []
    shape = tuple(int(s) for s in info["image_shape"])
    out: list[tuple[np.ndarray, str]] = []
    if all("path" in it for it in items):
        return _decoded(items, prep_of(info.get("image_prep"), shape))
    cfg = from_dict(ckpt["config"])
    data = run_data(cfg, info, run_dir)
    if isinstance(
        data.val, ImageSplit
    ):  # an evaluation that named no files (a head-only run's, before): the split does
        paths = data.val.paths
        named = [{**it, "path": paths[it["index"]]} for it in items if it["index"] < len(paths)]
        return _decoded(named, prep_of(info.get("image_prep"), shape))
    x = data.val.x.numpy()
    mean, std = info.get("mean"), info.get("std")
    if mean is not None and std is not None and x.ndim >= 2:
        # back to the pixels the user gave, not standardised ones (per feature or per channel)
        if np.size(mean) == int(np.prod(x.shape[1:])):
            stats: tuple[int, ...] = (1, *x.shape[1:])
        elif np.size(mean) in (1, x.shape[1]):
            stats = (1, -1) + (1,) * (x.ndim - 2)
        else:
            stats = ()
        if stats:
            x = x * np.asarray(std, dtype=np.float32).reshape(stats) + np.asarray(mean, dtype=np.float32).reshape(stats)
    lo, hi = _pixel_range(x)
    for it in items:
        if it["index"] < len(x):
            out.append((_to_uint8(x[it["index"]].reshape(shape), lo, hi), _caption(it)))
    return out


def _decoded(items: list[dict[str, Any]], prep: ImagePrep) -> list[tuple[np.ndarray, str]]:
    """Each mistake's image file, decoded as the model took it, and its caption."""
    from core.readers.images import decode_image

    return [(_to_uint8(decode_image(it["path"], prep)), _caption(it)) for it in items]


def _pixel_range(x: np.ndarray) -> tuple[float, float]:
    """The range pixels live in: 0-1 or 0-255 when the data fits one, else the data's own (one for all images)."""
    lo, hi = float(x.min()), float(x.max())
    if lo >= -1e-3 and hi <= 1.0 + 1e-3:
        return 0.0, 1.0
    if lo >= -1e-3 and hi <= 255.0 + 1e-3:
        return 0.0, 255.0 if hi > 16.0 else hi  # digits are 0-16
    return lo, hi


def _to_uint8(img: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """(C, H, W) floats -> HxW or HxWx3 uint8 over [lo, hi] (default: the image's own range)."""
    import numpy as np

    lo = float(img.min()) if lo is None else lo
    hi = float(img.max()) if hi is None else hi
    arr = (np.clip((img - lo) / (hi - lo or 1.0), 0.0, 1.0) * 255).astype(np.uint8)
    return arr[0] if arr.shape[0] == 1 else np.ascontiguousarray(arr.transpose(1, 2, 0))


def _caption(item: dict[str, Any]) -> str:
    return f"true {item['true']} → {item['predicted']} ({item['confidence']:.0%})"
