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

The two graphs include the input standardisation: they take raw features of
any batch size and return probabilities (or logits, ``--output logits``).

Every export verifies itself before it lands: the files are written to a
staging folder beside the destination, reloaded there with the format's own
loader, run on a validation batch and compared with the trained model; only
then are they moved into place with atomic writes. A failed export leaves no
file behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from core import predict as P
from core.errors import RunError, UserError
from core.progress import progress

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

FORMATS: dict[str, str] = {
    "safetensors": ".safetensors",
    "state-dict": ".pt",
    "torch-export": ".pt2",
    "onnx": ".onnx",
}
OUTPUTS = ("probabilities", "logits")
TOLERANCE = 1e-4
CHECK_ROWS = 1024          # a validation batch: enough to exercise the graph, quick to run
RANDOM_CHECK_ROWS = 256    # when the run's data is gone: seeded random rows around the training statistics
ONNX_EXTRA_HINT = "pip install 'traindesk[onnx]' (onnx, onnxscript, onnxruntime)"


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote and how well the reloaded file matched the trained model."""

    format: str
    path: Path
    files: tuple[Path, ...]
    output: str                 # what the exported artifact returns: "probabilities" or "logits"
    max_abs_diff: float
    rows_checked: int
    agree: int                  # rows whose predicted class matches the trained model's
    checked_on: str             # e.g. "360 validation rows"
    verifier: str               # the loader that reloaded the file
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())

    def summary(self) -> str:
        return (
            f"exported {self.format} to {self.path}: reloaded with {self.verifier}, max abs difference "
            f"{self.max_abs_diff:.3g} on {self.checked_on}, {self.agree}/{self.rows_checked} predictions agree"
        )


# ----------------------------------------------------------------------------- description (model.json)


def file_entry(fmt: str, output: str, desc: dict[str, Any] | None = None) -> dict[str, Any]:
    """What one exported file takes and returns (``desc``: a table's schema and task change both)."""
    graph = fmt in ("torch-export", "onnx")
    returns = output if graph else "logits"
    entry = {
        "format": fmt,
        "preprocessing_included": graph,
        "input": "raw features" if graph else "standardised features: apply 'preprocessing' first",
        "output": returns,
        "output_name": returns,
        "output_shape": ["batch", "classes"],
    }
    if desc is not None:
        from core.tabular_export import table_entry

        entry = table_entry(fmt, entry, desc)
    return entry


def _merged_sidecar(dest_dir: Path, desc: dict[str, Any], name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """``model.json`` for ``dest_dir``: other files of the same model are kept, another model's are dropped."""
    files: dict[str, Any] = {}
    old_path = dest_dir / P.SIDECAR
    try:
        old = json.loads(old_path.read_text(encoding="utf-8"))
        if old.get("weights_sha256") == desc["weights_sha256"]:
            files = {k: v for k, v in (old.get("files") or {}).items() if (dest_dir / k).exists()}
    except (OSError, ValueError, AttributeError):
        pass
    files[name] = entry
    return {**desc, "files": files}


# ----------------------------------------------------------------------------- the validation batch


@dataclass(frozen=True)
class CheckBatch:
    raw: torch.Tensor          # raw features, as the exported graphs take them
    where: str                 # "360 validation rows" or why random rows were used


def validation_batch(data: dict[str, Any], rows: int = CHECK_ROWS) -> CheckBatch:
    """Up to ``rows`` raw validation samples (the run's seeded split); random rows if the data is gone."""
    import torch

    from core.config import from_dict
    from core.data import ImageSplit, full_tensors, load_data

    info = data["info"]
    shape = tuple(int(s) for s in info["input_shape"])
    try:
        cfg = from_dict(data["config"])
        prepared = load_data(cfg.data, seed=cfg.train.seed, share=False, task=cfg.train.task)
        val = prepared.val
        if isinstance(val, ImageSplit):
            val = ImageSplit(val.paths[:rows], val.labels[:rows])
        x, _ = full_tensors(val, prepared.info)
        x = x[:rows]
        if len(x) and tuple(x.shape[1:]) != shape and math.prod(x.shape[1:]) == math.prod(shape):
            x = x.reshape(len(x), *shape)  # a run from before images became (C, H, W): flat samples
        if tuple(x.shape[1:]) != shape or len(x) < 2:
            raise UserError(f"the data no longer has samples of shape {shape}")
        # load_data standardised with the statistics of the data as it is now: undo exactly that
        raw = _unstandardize(x, prepared.info.mean, prepared.info.std, shape)
        return CheckBatch(raw.contiguous(), f"{len(raw)} validation rows")
    except UserError as exc:
        gen = torch.Generator().manual_seed(0)
        z = torch.randn((RANDOM_CHECK_ROWS, *shape), generator=gen)
        raw = _unstandardize(z, info["mean"], info["std"], shape)
        from core.tabular_export import valid_rows

        raw = valid_rows(info, raw)  # a table's random rows made real encodings (indices, 0/1 indicators)
        return CheckBatch(raw.contiguous(), f"{RANDOM_CHECK_ROWS} random rows (validation data unavailable: {exc})")


def _unstandardize(x: torch.Tensor, mean: Any, std: Any, shape: tuple[int, ...]) -> torch.Tensor:
    import torch

    sshape = P.stats_shape(shape, len(mean), "export")
    m = torch.tensor(list(mean), dtype=torch.float32).reshape(sshape)
    s = torch.tensor(list(std), dtype=torch.float32).reshape(sshape)
    return x * s + m


# ----------------------------------------------------------------------------- writers (into the staging folder)


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    # clones: safetensors refuses tensors sharing storage, torch.save would keep views' whole storages
    return {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}


def write_safetensors(model: nn.Module, desc: dict[str, Any], path: Path) -> None:
    from safetensors.torch import save_file

    embedded = {**desc, "export": file_entry("safetensors", "logits", desc)}
    save_file(_state(model), str(path), metadata={P.META_KEY: json.dumps(embedded)})


def write_state_dict(model: nn.Module, desc: dict[str, Any], path: Path) -> None:
    import torch

    torch.save(_state(model), path)


def _example(raw: torch.Tensor) -> torch.Tensor:
    # batch 2, not 1: torch.export specialises a dimension whose example size is 0 or 1
    return raw[:2].clone()


def write_torch_export(model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
    import torch

    graph = P.standardized(model, desc, output, "export")
    batch = torch.export.Dim("batch")
    try:
        with _quiet():
            program = torch.export.export(graph, (_example(raw),), dynamic_shapes=({0: batch},), strict=False)
    except Exception as exc:
        raise RunError(f"export: torch.export cannot trace this model: {_first_line(exc)}") from None
    embedded = {**desc, "export": file_entry("torch-export", output, desc)}
    torch.export.save(program, str(path), extra_files={P.PT2_EXTRA: json.dumps(embedded)})


def require_onnx_extra() -> None:
    """The exporter needs onnx and onnxscript; say which extra to install when they are missing."""
    for module in ("onnx", "onnxscript"):
        try:
            __import__(module)
        except ModuleNotFoundError:
            raise UserError(
                f"export: format onnx needs the optional extra 'onnx' (module {module!r} is missing): {ONNX_EXTRA_HINT}"
            ) from None


def write_onnx(model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
    import torch

    require_onnx_extra()
    graph = P.standardized(model, desc, output, "export")
    try:
        with _quiet():
            program = torch.onnx.export(
                graph, (_example(raw),), None, dynamo=True, verbose=False,
                input_names=["x"], output_names=[file_entry("onnx", output, desc)["output_name"]],
                dynamic_shapes=({0: torch.export.Dim("batch")},),
            )
    except Exception as exc:
        raise RunError(f"export: the ONNX exporter cannot convert this model: {_first_line(exc)}") from None
    assert program is not None
    embedded = {**desc, "export": file_entry("onnx", output, desc)}
    program.model.metadata_props[P.META_KEY] = json.dumps(embedded)
    # one self-contained file: our models are far below protobuf's 2 GB limit
    program.save(str(path), external_data=False)
    from core.tabular_export import add_raw_columns, tabular_schema

    schema = tabular_schema(desc)
    if schema is not None:  # a table's model takes its raw columns: the schema's lookups and fills go in front
        try:
            add_raw_columns(str(path), schema)
        except Exception as exc:
            raise RunError(f"export: cannot put the table's preprocessing into the ONNX graph: "
                           f"{_first_line(exc)}") from None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' chatter (missing torchvision ops, deprecations); errors still raise."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    bar = _tqdm_class()
    interval = bar.monitor_interval if bar is not None else 0
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        if bar is not None:
            # torch.fx's interpreter makes a (disabled) tqdm bar during ONNX decompositions; its first
            # bar would start tqdm's monitor thread, which then lives as long as the process
            bar.monitor_interval = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if bar is not None:
            bar.monitor_interval = interval


def _tqdm_class() -> Any:
    try:
        from tqdm import std
    except ImportError:
        return None
    return std.tqdm


def _first_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:200]}"


# ----------------------------------------------------------------------------- verification (from the staged files)


@dataclass(frozen=True)
class Check:
    max_abs_diff: float
    rows: int
    agree: int
    verifier: str


def _compare(got: np.ndarray, want: np.ndarray) -> tuple[float, int]:
    import numpy as np

    if got.shape != want.shape:
        return float("inf"), 0
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
    agree = int((got.argmax(axis=1) == want.argmax(axis=1)).sum())
    return diff, agree


def _reference(model: nn.Module, desc: dict[str, Any], output: str, raw: torch.Tensor) -> np.ndarray:
    """The trained model on ``raw``, standardised exactly as in training."""
    import torch

    with torch.no_grad():
        return P.standardized(model, desc, output, "export")(raw).numpy()


def verify(fmt: str, path: Path, model: nn.Module, desc: dict[str, Any], output: str, raw: torch.Tensor) -> Check:
    """Reload ``path`` with the format's own loader and compare it with the trained model."""
    try:
        got, single, verifier = _reload_and_run(fmt, path, desc, output, raw)
    except UserError:
        raise
    except Exception as exc:  # the file we just wrote does not load or run: the export failed
        raise RunError(f"export: {path.name}: reloading the written file failed: {_first_line(exc)}") from None
    kind = "probabilities" if fmt == "safetensors" else "logits" if fmt == "state-dict" else output
    want = _reference(model, desc, kind, raw)
    for out in (got, single):
        if out is not None and out.shape[1:] != want.shape[1:]:
            raise RunError(f"export: {path.name}: the reloaded model returns shape {out.shape}, expected "
                           f"(batch, {want.shape[1]})")
    diff, agree = _compare(got, want)
    if single is not None:  # the graphs take any batch size: one row must give the same answer
        diff = max(diff, _compare(single, want[:1])[0])
    return Check(diff, len(got), agree, verifier)


def _reload_and_run(fmt: str, path: Path, desc: dict[str, Any], output: str,
                    raw: torch.Tensor) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(outputs on the batch, outputs on its first row alone or None, the loader's name)."""
    import torch

    if fmt == "safetensors":
        meta = P.sidecar_entry(path)  # core's rebuild path: from the model.json beside the weights
        if meta is None:
            raise RunError(f"export: the {P.SIDECAR} beside {path.name} does not list it")
        return P.load_safetensors_predictor(path, meta).probabilities(raw.numpy()), None, "safetensors + model.json"
    if fmt == "state-dict":
        rebuilt = P.rebuild_module(desc, P.load_state_dict_file(path), str(path))
        with torch.no_grad():
            return P.standardized(rebuilt, desc, "logits", str(path))(raw).numpy(), None, \
                "torch.load(weights_only=True)"
    if fmt == "torch-export":
        module = torch.export.load(str(path)).module()
        with torch.no_grad():
            return module(raw).numpy(), module(raw[:1]).numpy(), "torch.export.load"
    return _run_onnx(path, raw.numpy(), desc)


def _run_onnx(path: Path, x: np.ndarray, desc: dict[str, Any] | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """onnxruntime when installed, else onnx's reference evaluator (slow, exact semantics).

    A table's graph takes raw columns: it is fed the columns (strings, NaN) that encode to ``x``."""
    from core.tabular_export import onnx_feed, tabular_schema

    schema = tabular_schema(desc or {})

    def feed(rows: np.ndarray, name: str = "x") -> dict[str, Any]:
        return onnx_feed(schema, rows) if schema is not None else {name: rows}

    try:
        import onnxruntime  # noqa: F401
    except ModuleNotFoundError:
        from onnx.reference import ReferenceEvaluator

        ref: Any = ReferenceEvaluator(str(path))
        return ref.run(None, feed(x))[0], ref.run(None, feed(x[:1]))[0], "onnx.reference (no onnxruntime)"
    session = P._onnx_session(path)  # noqa: SLF001 - the loader predict uses
    name = session.get_inputs()[0].name
    return session.run(None, feed(x, name))[0], session.run(None, feed(x[:1], name))[0], "onnxruntime"


# ----------------------------------------------------------------------------- the export


def resolve_out(run_dir: Path, fmt: str, out: Path | None) -> Path:
    """The file to write: ``--out`` (a file, or a folder for model.<ext>), else RUN_DIR/exports/model.<ext>."""
    suffix = FORMATS[fmt]
    exports = run_dir / "exports"
    out = exports / f"model{suffix}" if out is None else Path(out).expanduser()
    if out.parent == exports and not exports.exists():
        try:
            exports.mkdir()  # the run's own exports/ folder (runs from before it existed)
        except OSError as exc:
            raise RunError(f"export: cannot create {exports}: {exc.strerror or exc}") from None
    if out.is_dir():
        return out / f"model{suffix}"
    if out.suffix != suffix:
        raise UserError(f"export: --out {out} must end with {suffix} for format {fmt}")
    if not out.parent.is_dir():
        what = "is not a folder" if out.parent.exists() else "does not exist"
        raise UserError(f"export: cannot write {out}: {out.parent} {what}")
    return out


def _load_run(run_dir: Path, checkpoint: str = "last") -> tuple[dict[str, Any], nn.Module]:
    from core.checkpoint import checkpoint_file, load_checkpoint, model_from_checkpoint

    if not run_dir.is_dir():
        raise RunError(f"export: run directory not found: {run_dir}")
    data = load_checkpoint(checkpoint_file(run_dir, checkpoint, "export"))
    return data, model_from_checkpoint(data, where=f"export: {run_dir}")


def export_run(run_dir: Path, fmt: str, out: Path | None = None, output: str = "probabilities",
               checkpoint: str = "last") -> ExportResult:
    """Export the run's ``last`` or ``best`` checkpoint as ``fmt``, verify the written file, then move it into place."""
    t0 = time.perf_counter()
    if fmt not in FORMATS:
        raise UserError(f"export: unknown format {fmt!r}; choose one of " + ", ".join(FORMATS))
    if output not in OUTPUTS:
        raise UserError(f"export: unknown output {output!r}; choose probabilities or logits")
    run_dir = Path(run_dir).expanduser()
    if fmt == "onnx":
        require_onnx_extra()  # before any work: the user learns what to install at once
    data, model = _load_run(run_dir, checkpoint)
    dest = resolve_out(run_dir, fmt, out)
    stage = _make_stage(dest)
    try:
        with progress(3, f"export {fmt}", unit="step") as bar:
            bar.set_postfix_str("validation rows")
            desc = P.describe(data, run_dir)
            batch = validation_batch(data)
            entry = file_entry(fmt, output, desc)
            staged, staged_side = stage / dest.name, stage / P.SIDECAR
            bar.update(1)
            bar.set_postfix_str("writing")
            _write(fmt, model, desc, staged, output, batch.raw)
            _write_sidecar(staged_side, {**desc, "files": {dest.name: entry}})
            bar.update(1)
            bar.set_postfix_str("verifying")
            check = verify(fmt, staged, model, desc, output, batch.raw)
            bar.update(1)
        if not check.max_abs_diff <= TOLERANCE:
            raise RunError(
                f"export: {dest.name}: the reloaded {fmt} model differs from the trained model by "
                f"{check.max_abs_diff:.3g} (more than {TOLERANCE:g}) on {batch.where}; nothing was written"
            )
        entry = {**entry, "sha256": _sha256(staged), "verified": {
            "max_abs_diff": check.max_abs_diff, "rows": check.rows, "agree": check.agree,
            "on": batch.where, "with": check.verifier, "tolerance": TOLERANCE,
        }}
        files = _land(staged, dest, _merged_sidecar(dest.parent, desc, dest.name, entry))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return ExportResult(fmt, dest, files, entry["output"], check.max_abs_diff, check.rows, check.agree,
                        batch.where, check.verifier, time.perf_counter() - t0)


def _write(fmt: str, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
    writers: dict[str, Callable[[], None]] = {
        "safetensors": lambda: write_safetensors(model, desc, path),
        "state-dict": lambda: write_state_dict(model, desc, path),
        "torch-export": lambda: write_torch_export(model, desc, path, output, raw),
        "onnx": lambda: write_onnx(model, desc, path, output, raw),
    }
    try:
        writers[fmt]()
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
    from core.runlog import atomic_write_bytes, atomic_write_json

    side = dest.parent / P.SIDECAR
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
