"""Export a run's trained model, verified: ``traindesk export RUN_DIR --format F --out PATH``.

Formats:

- ``safetensors``: the weights, with the model description embedded in the
  header and written beside them as ``model.json`` (architecture, input shape,
  class names, standardisation statistics): core rebuilds the module from it.
- ``state-dict``: ``torch.save`` of the state dict (``.pt``); load it with
  ``torch.load(..., weights_only=True)`` into the model ``model.json`` describes.
- ``torch-export``: a ``torch.export`` program (``.pt2``) that runs with
  ``torch.export.load(path).module()`` and no TrainDesk code.
- ``onnx``: an ONNX graph (the optional extra ``onnx``).
- ``onnx-int8``: the same graph quantized to int8 (static, QDQ, per-channel weights), calibrated on a
  sample of the run's training split; refused when it loses more than ``max_loss`` points of accuracy
  (or R²) on the validation rows, unless ``accept_loss``.

The two graphs include the input standardisation: they take raw features of
any batch size and return probabilities (or logits, ``--output logits``).

Every export verifies itself before it lands: the files are written to a
staging folder beside the destination, reloaded there with the format's own
loader, run on a validation batch and compared with the trained model; only
then are they moved into place with atomic writes. A failed export leaves no
file behind. Every export also says what it cost (``ExportResult.cost``, the
``cost`` of its ``model.json`` entry): the file's accuracy (R² for a
regression) on the validation rows beside the trained model's, how many
answers agree, its size and its rows/s on this machine beside the trained
model's. A run's fine-tuned text encoder goes with every export: copied beside
``model.json`` as ``text-encoder/`` (staged and verified with the file, landed
before ``model.json``), which names it relative to itself, so the folder
predicts and serves wherever it is copied.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import RunError, UserError
from core.host.progress import progress
from core.runfiles.layout import RunDir
from core.services.formats import EXPORT_FORMATS, OUTPUTS, ModelFormat, export_format
from core.services.formats import onnx as onnx_format
from core.services.formats.base import first_line
from core.services.formats.compact import CALIBRATION_ROWS
from core.services.formats.description import SIDECAR, describe, file_entry, merged_sidecar
from core.services.formats.module import standardized, unstandardize

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

FORMATS: dict[str, str] = {name: fmt.suffix for name, fmt in EXPORT_FORMATS.items()}  # --format -> suffix
MAX_LOSS = 1.0  # points of accuracy (or of R² x 100) a lossy export may lose before it is refused
TOLERANCE = 1e-4  # of the output's largest value, or absolute below 1: a regression's prices in thousands
# differ by float32's rounding, ~1e-7 of them, which no graph of the same model can avoid
CHECK_ROWS = 1024  # a validation batch: enough to exercise the graph, quick to run
RANDOM_CHECK_ROWS = 256  # when the run's data is gone: seeded random rows around the training statistics


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote and how well the reloaded file matched the trained model."""

    format: str
    path: Path
    files: tuple[Path, ...]
    output: str  # what the exported artifact returns: "probabilities" or "logits"
    max_abs_diff: float
    rows_checked: int
    agree: int  # rows whose predicted class matches the trained model's
    checked_on: str  # e.g. "360 validation rows"
    verifier: str  # the loader that reloaded the file
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())
    cost: dict[str, Any] = field(default_factory=dict)  # what the file costs against the trained model

    def summary(self) -> str:
        return (
            f"exported {self.format} to {self.path}: reloaded with {self.verifier}, max abs difference "
            f"{self.max_abs_diff:.3g} on {self.checked_on}, {self.agree}/{self.rows_checked} predictions agree"
            + (f"; {cost_line(self.cost)}" if self.cost else "")
        )


def cost_line(cost: dict[str, Any]) -> str:
    """What an export costs, in a line: its figure beside the trained model's, size, speed."""
    parts = []
    if "metric" in cost:
        parts.append(f"{cost['metric']} {cost['file']:.4f} (trained {cost['trained']:.4f}, {cost['loss']:+.2f} points)")
    parts.append(f"{cost['size_bytes'] / 1e6:.2f} MB")
    parts.append(f"{cost['rows_per_s']:,.0f} rows/s (trained model {cost['trained_rows_per_s']:,.0f})")
    return ", ".join(parts)


# ----------------------------------------------------------------------------- the validation batch


@dataclass(frozen=True)
class CheckBatch:
    raw: torch.Tensor  # raw features, as the exported graphs take them
    where: str  # "360 validation rows" or why random rows were used
    y: np.ndarray | None = None  # their labels (a regression's standardised target); None for random rows
    prepared: Any = field(default=None, compare=False, repr=False)  # the run's data they came from (its split)


def validation_batch(data: dict[str, Any], run_dir: Path, rows: int = CHECK_ROWS) -> CheckBatch:
    """Up to ``rows`` raw validation samples (the run's seeded split); random rows if the data is gone."""
    import torch

    from core.config import from_dict
    from core.data import ImageSplit, full_tensors
    from core.services.data import run_data

    info = data["info"]
    shape = tuple(int(s) for s in info["input_shape"])
    try:
        prepared = run_data(from_dict(data["config"]), info, run_dir)
        val = prepared.val
        if isinstance(val, ImageSplit):
            val = ImageSplit(val.paths[:rows], val.labels[:rows])
        x, y = full_tensors(val, prepared.info)
        x, y = x[:rows], y[:rows]
        if len(x) and tuple(x.shape[1:]) != shape and math.prod(x.shape[1:]) == math.prod(shape):
            x = x.reshape(len(x), *shape)  # a run from before images became (C, H, W): flat samples
        if tuple(x.shape[1:]) != shape or len(x) < 2:
            raise UserError(f"the data no longer has samples of shape {shape}")
        # load_data standardised with the statistics of the data as it is now: undo exactly that
        raw = unstandardize(x, prepared.info.mean, prepared.info.std, shape, "export")
        return CheckBatch(raw.contiguous(), f"{len(raw)} validation rows", y.numpy(), prepared)
    except UserError as exc:
        gen = torch.Generator().manual_seed(0)
        z = torch.randn((RANDOM_CHECK_ROWS, *shape), generator=gen)
        raw = unstandardize(z, info["mean"], info["std"], shape, "export")
        from core.services.formats.tabular import valid_rows

        raw = valid_rows(info, raw)  # a table's random rows made real encodings (indices, 0/1 indicators)
        return CheckBatch(raw.contiguous(), f"{RANDOM_CHECK_ROWS} random rows (validation data unavailable: {exc})")


def calibration_rows(batch: CheckBatch, fmt: str, rows: int) -> torch.Tensor:
    """Up to ``rows`` raw samples of the run's training split (of the data ``batch`` was read from), spread
    over it (seeded), decoded and preprocessed as the model sees them: what a quantized export measures its
    activations' ranges on."""
    import numpy as np

    from core.data import ImageSplit, TensorSplit, full_tensors

    prepared = batch.prepared
    if prepared is None:
        raise UserError(f"export: {fmt} calibrates on the run's training split, which cannot be read ({batch.where})")
    train = prepared.train
    pick = np.sort(np.random.default_rng(0).permutation(len(train))[:rows])
    if isinstance(train, ImageSplit):
        train = ImageSplit(tuple(train.paths[i] for i in pick), tuple(train.labels[i] for i in pick))
    elif isinstance(train, TensorSplit):
        train = TensorSplit(train.x[pick], train.y[pick])
    x, _ = full_tensors(train, prepared.info)
    shape = tuple(int(s) for s in batch.raw.shape[1:])
    return unstandardize(x.reshape(len(x), *shape), prepared.info.mean, prepared.info.std, shape, "export").contiguous()


# ----------------------------------------------------------------------------- verification (from the staged files)


@dataclass(frozen=True)
class Check:
    max_abs_diff: float
    rows: int
    agree: int
    verifier: str
    max_diff: float  # the largest difference over max(1, the output's largest |value|): what TOLERANCE bounds
    got: Any = field(default=None, compare=False, repr=False)  # the file's outputs on the batch
    want: Any = field(default=None, compare=False, repr=False)  # the trained model's


def _compare(got: np.ndarray, want: np.ndarray) -> tuple[float, float, int]:
    """(largest absolute difference, largest difference relative to max(1, the output's largest |value|), rows
    whose argmax agree)."""
    import numpy as np

    if got.shape != want.shape:
        return float("inf"), float("inf"), 0
    if not got.size:
        return 0.0, 0.0, 0
    w = want.astype(np.float64)
    delta = np.abs(got.astype(np.float64) - w)
    agree = int((got.argmax(axis=1) == want.argmax(axis=1)).sum())
    # float32 rounds at the scale of the output's values, not of one row's: a price predicted near 0 by a model
    # of prices in thousands differs by as much as one predicted at 3,000
    scale = np.maximum(1.0, np.abs(w).max(axis=0, keepdims=True))
    return float(delta.max()), float((delta / scale).max()), agree


def _reference(model: nn.Module, desc: dict[str, Any], output: str, raw: torch.Tensor) -> np.ndarray:
    """The trained model on ``raw``, standardised exactly as in training."""
    import torch

    with torch.no_grad():
        return standardized(model, desc, output, "export")(raw).numpy()


def verify(
    fmt: ModelFormat, path: Path, model: nn.Module, desc: dict[str, Any], output: str, raw: torch.Tensor
) -> Check:
    """Reload ``path`` with the format's own loader and compare it with the trained model."""
    try:
        got, single, verifier = fmt.reload(path, desc, output, raw)
    except UserError:
        raise
    except Exception as exc:  # the file we just wrote does not load or run: the export failed
        raise RunError(f"export: {path.name}: reloading the written file failed: {first_line(exc)}") from None
    kind = fmt.reloads_as or output
    want = _reference(model, desc, kind, raw)
    for out in (got, single):
        if out is not None and out.shape[1:] != want.shape[1:]:
            raise RunError(
                f"export: {path.name}: the reloaded model returns shape {out.shape}, expected (batch, {want.shape[1]})"
            )
    diff, scaled, agree = _compare(got, want)
    if single is not None:  # the graphs take any batch size: one row must give the same answer
        one = _compare(single, want[:1])
        diff, scaled = max(diff, one[0]), max(scaled, one[1])
    return Check(diff, len(got), agree, verifier, scaled, got, want)


# ----------------------------------------------------------------------------- the export


def resolve_out(run_dir: Path, fmt: str, out: Path | None) -> Path:
    """The file to write: ``--out`` (a file, or a folder for model.<ext>), else RUN_DIR/exports/model.<ext>."""
    suffix = export_format(fmt).suffix
    exports = RunDir(run_dir).exports
    stem = export_format(fmt).stem
    out = exports / f"{stem}{suffix}" if out is None else Path(out).expanduser()
    if out.parent == exports and not exports.exists():
        try:
            exports.mkdir()  # the run's own exports/ folder (runs from before it existed)
        except OSError as exc:
            raise RunError(f"export: cannot create {exports}: {exc.strerror or exc}") from None
    if out.is_dir():
        return out / f"{stem}{suffix}"
    if out.suffix != suffix:
        raise UserError(f"export: --out {out} must end with {suffix} for format {fmt}")
    if not out.parent.is_dir():
        what = "is not a folder" if out.parent.exists() else "does not exist"
        raise UserError(f"export: cannot write {out}: {out.parent} {what}")
    return out


def _load_run(run_dir: Path, checkpoint: str = "last") -> tuple[dict[str, Any], nn.Module]:
    from core.training.checkpoint import checkpoint_file, load_checkpoint, model_from_checkpoint

    if not run_dir.is_dir():
        raise RunError(f"export: run directory not found: {run_dir}")
    data = load_checkpoint(checkpoint_file(run_dir, checkpoint, "export"))
    return data, model_from_checkpoint(data, where=f"export: {run_dir}")


def export_run(
    run_dir: Path,
    fmt: str,
    out: Path | None = None,
    output: str = "probabilities",
    checkpoint: str = "last",
    max_loss: float = MAX_LOSS,
    accept_loss: bool = False,
) -> ExportResult:
    """Export the run's ``last`` or ``best`` checkpoint as ``fmt``, verify the written file, then move it into
    place. A lossy format (int8) that loses more than ``max_loss`` points on the validation rows is refused,
    unless ``accept_loss``."""
    from core.data.text_tuning import FOLDER, carry, own_folder

    t0 = time.perf_counter()
    kind = export_format(fmt)
    if output not in OUTPUTS:
        raise UserError(f"export: unknown output {output!r}; choose probabilities or logits")
    run_dir = Path(run_dir).expanduser()
    if isinstance(kind, onnx_format.OnnxFormat):
        onnx_format.require_extra()  # before any work: the user learns what to install at once
    data, model = _load_run(run_dir, checkpoint)
    dest = resolve_out(run_dir, fmt, out)
    stage = _make_stage(dest)
    try:
        with progress(3, f"export {fmt}", unit="step") as bar:
            bar.set_postfix_str("validation rows")
            desc = describe(data, run_dir)
            encoder = own_folder(desc.get("schema"), run_dir)
            if encoder is not None:  # the run's tuned text encoder goes with the model, named relative to it
                carry(encoder, stage)
            batch = validation_batch(data, run_dir)
            if kind.lossy and batch.y is None:
                raise UserError(
                    f"export: {fmt} is checked on the run's validation split, which is not there "
                    f"({batch.where}); train with data.val_fraction above 0, or export as onnx"
                )
            traced = calibration_rows(batch, fmt, CALIBRATION_ROWS) if kind.calibrates else batch.raw
            entry = file_entry(kind, output, desc)
            staged, staged_side = stage / dest.name, stage / SIDECAR
            bar.update(1)
            bar.set_postfix_str("writing")
            _write(kind, model, desc, staged, output, traced)
            _write_sidecar(staged_side, {**desc, "files": {dest.name: entry}})
            bar.update(1)
            bar.set_postfix_str("verifying")
            check = verify(kind, staged, model, desc, output, batch.raw)
            cost = measure_cost(kind, staged, model, desc, output, batch, check)
            bar.update(1)
        if kind.lossy:
            _check_loss(fmt, cost, max_loss, accept_loss, batch.where)
        elif not check.max_diff <= TOLERANCE:
            raise RunError(
                f"export: {dest.name}: the reloaded {fmt} model differs from the trained model by "
                f"{check.max_abs_diff:.3g} (more than {TOLERANCE:g} of the output's largest value, or absolute below 1) on "
                f"{batch.where}; nothing was written"
            )
        entry = {
            **entry,
            "sha256": _sha256(staged),
            "verified": {
                "max_abs_diff": check.max_abs_diff,
                "rows": check.rows,
                "agree": check.agree,
                "on": batch.where,
                "with": check.verifier,
                **({} if kind.lossy else {"tolerance": TOLERANCE}),
            },
            "cost": cost,
        }
        if encoder is not None:  # before the model.json that names it
            carry(stage / FOLDER, dest.parent)
        files = _land(staged, dest, merged_sidecar(dest.parent, desc, dest.name, entry))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return ExportResult(
        fmt,
        dest,
        files,
        entry["output"],
        check.max_abs_diff,
        check.rows,
        check.agree,
        batch.where,
        check.verifier,
        time.perf_counter() - t0,
        cost=cost,
    )


def _check_loss(fmt: str, cost: dict[str, Any], max_loss: float, accept_loss: bool, where: str) -> None:
    if accept_loss or "loss" not in cost or cost["loss"] >= -max_loss:
        return
    raise UserError(
        f"export: {fmt} loses {-cost['loss']:.2f} points of {cost['metric']} on {where} "
        f"({cost['file']:.4f} against the trained model's {cost['trained']:.4f}; at most {max_loss:g} allowed); "
        "nothing was written; keep it anyway with --accept-loss"
    )


def measure_cost(
    fmt: ModelFormat, path: Path, model: nn.Module, desc: dict[str, Any], output: str, batch: CheckBatch, check: Check
) -> dict[str, Any]:
    """The written file against the trained model on the validation rows: figure, agreement, size, speed."""
    import numpy as np
    import torch

    got, want = np.asarray(check.got, dtype=np.float64), np.asarray(check.want, dtype=np.float64)
    cost: dict[str, Any] = {"rows": len(got), "size_bytes": path.stat().st_size}
    regression = desc.get("task") == "regression"
    if regression:
        spread = float(np.std(want)) or 1.0
        cost["agreement"] = float(np.mean(np.abs(got - want).max(axis=1) <= 0.05 * spread))
    else:
        cost["agreement"] = float(np.mean(got.argmax(axis=1) == want.argmax(axis=1)))
    if batch.y is not None and len(batch.y) == len(got):
        if regression:
            target = (desc.get("schema") or {}).get("target") or {}
            y = batch.y.astype(np.float64) * float(target.get("std", 1.0)) + float(target.get("mean", 0.0))

            def r2(pred: np.ndarray) -> float:
                return float(1 - np.sum((y - pred[:, 0]) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-12))

            cost.update(metric="r2", file=r2(got), trained=r2(want))
        else:
            cost.update(
                metric="accuracy",
                file=float(np.mean(got.argmax(axis=1) == batch.y)),
                trained=float(np.mean(want.argmax(axis=1) == batch.y)),
            )
        cost["loss"] = round(100 * (cost["file"] - cost["trained"]), 4)  # points; negative: the file is worse
    x = batch.raw.numpy()
    predictor = fmt.load(path)
    graph = standardized(model, desc, output, "export")

    def trained(rows: np.ndarray) -> Any:
        with torch.no_grad():
            return graph(torch.from_numpy(rows))

    cost["rows_per_s"] = _rows_per_s(predictor.raw, x)
    cost["trained_rows_per_s"] = _rows_per_s(trained, x)
    return cost


def _rows_per_s(run: Any, x: np.ndarray, repeats: int = 3) -> float:
    """The best of ``repeats`` timed passes over ``x`` (after one untimed), in rows per second."""
    run(x)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        run(x)
        best = min(best, time.perf_counter() - t)
    return len(x) / max(best, 1e-9)


def _write(
    fmt: ModelFormat, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor
) -> None:
    try:
        fmt.write(model, desc, path, output, raw)
    except OSError as exc:
        raise RunError(f"export: cannot write {path}: {exc.strerror or exc}") from None


def _write_sidecar(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def _make_stage(dest: Path) -> Path:
    # beside the destination: an unwritable folder fails here, before any work, and the
    # final files are written on the same file system
    try:
        return Path(tempfile.mkdtemp(prefix=".traindesk-export-", dir=dest.parent))
    except OSError as exc:
        raise RunError(f"export: cannot write to {dest.parent}: {exc.strerror or exc}") from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _land(staged: Path, dest: Path, sidecar: dict[str, Any]) -> tuple[Path, ...]:
    """Atomic writes of the verified file and of model.json; the model file goes if model.json fails."""
    from core.runfiles.writing import atomic_write_bytes, atomic_write_json

    side = dest.parent / SIDECAR
    try:
        atomic_write_bytes(dest, staged.read_bytes())
    except OSError as exc:
        raise RunError(f"export: cannot write {dest}: {exc.strerror or exc}") from None
    try:
        atomic_write_json(side, sidecar)
    except OSError as exc:
        with contextlib.suppress(OSError):
            dest.unlink()
        raise RunError(f"export: cannot write {side}: {exc.strerror or exc}") from None
    return dest, side
