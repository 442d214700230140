"""Batch prediction with an exported model: ``traindesk predict MODEL INPUT``.

MODEL is an export that runs on its own: ``.safetensors`` (core rebuilds the
module from the metadata it carries, or the ``model.json`` beside it), a
``.pt2`` torch.export program or an ``.onnx`` graph (onnxruntime); a ``.pt``
state dict is accepted when a ``model.json`` beside it describes it. MODEL may
also be a run directory (its ``checkpoints/best.pt`` or ``last.pt``,
``--checkpoint``) or a checkpoint file: the checkpoint is described as an
export of it would be (``describe``) and rebuilt the way a ``.safetensors``
export is, so the predictions are those of ``export --format safetensors``
then ``predict``, byte for byte. INPUT is
a CSV, an NPZ or an image folder with the training features, raw (unscaled):
every predictor standardises with the statistics it carries.

With ``--workers N`` the rows are cut into fixed batches (the same batches
whatever N is) and whole batches go to a pool of N processes, each with one
compute thread and the model loaded once (N = 1: this process, one thread);
a CSV with one line per record goes in pieces of whole batches that the
processes parse themselves, and an uncompressed NPZ's rows are read by the
processes from the file. The output is identical for every N, byte for
byte. Without ``--workers`` this
process predicts as with ``--workers 1`` and starts one process per CPU core for the rest only when the
rate it measured says they repay their start-up (``_AutoPool``). Nothing here imports torch at module
level (an ONNX model never does): the CLI imports this module at start-up for every command.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import pickle
import signal
import threading
import time
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, overload

from core.errors import DataError, RunError, UserError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

META_KEY = "traindesk.model"          # metadata key in .safetensors / .onnx; extra file name in .pt2
PT2_EXTRA = "traindesk.model.json"
META_FORMAT = "traindesk.model"
SIDECAR = "model.json"
RUNNABLE_SUFFIXES = (".safetensors", ".pt2", ".onnx", ".pt")
BATCH_ROWS = 2048                      # fixed batch boundaries: results do not depend on --workers


# ----------------------------------------------------------------------------- the model with its preprocessing


def stats_shape(input_shape: Sequence[int], n_stats: int, where: str) -> tuple[int, ...]:
    """How mean/std broadcast over one sample: per feature (the sample's shape) or per image channel."""
    if n_stats == math.prod(input_shape):
        return tuple(input_shape)
    if len(input_shape) == 3 and n_stats == input_shape[0]:
        return (int(input_shape[0]), 1, 1)
    raise RunError(f"{where}: {n_stats} standardisation statistics do not fit input shape {tuple(input_shape)}")


@functools.cache
def _standardized_class() -> type:
    # Built on first use so that importing this module (every CLI start) does not import torch.
    import torch
    from torch import nn

    class Standardized(nn.Module):
        """Raw features in; the trained model behind the training standardisation; logits or probabilities out."""

        mean: torch.Tensor
        std: torch.Tensor

        def __init__(self, model: nn.Module, mean: torch.Tensor, std: torch.Tensor, probabilities: bool,
                     target_scale: tuple[float, float] | None = None) -> None:
            super().__init__()
            self.model = model
            self.register_buffer("mean", mean)
            self.register_buffer("std", std)
            self.probabilities = probabilities
            self.target_scale = target_scale  # regression: the output in the target's units

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.model((x - self.mean) / self.std)
            if self.target_scale is not None:
                return z * self.target_scale[1] + self.target_scale[0]
            return torch.softmax(z, dim=1) if self.probabilities else z

    return Standardized


def standardized(model: nn.Module, meta: dict[str, Any], output: str, where: str = "model") -> nn.Module:
    """``model`` wrapped with the preprocessing that ``meta`` describes; output "logits" or "probabilities"."""
    import torch

    shape = [int(s) for s in meta["input"]["shape"]]
    pre = meta["preprocessing"]
    sshape = stats_shape(shape, len(pre["mean"]), where)
    mean = torch.tensor(pre["mean"], dtype=torch.float32).reshape(sshape)
    std = torch.tensor(pre["std"], dtype=torch.float32).reshape(sshape)
    target = (meta.get("schema") or {}).get("target") or {}
    scale = (float(target["mean"]), float(target["std"])) if meta.get("task") == "regression" else None
    wrapped: nn.Module = _standardized_class()(model, mean, std, output == "probabilities", scale)
    return wrapped.eval()


def rebuild_module(meta: dict[str, Any], state: dict[str, Any], where: str) -> nn.Module:
    """The bare trained module (standardised input, logits out) from a description and its weights."""
    from core.config import ConfigError, from_dict
    from core.models import build_model

    try:
        model_cfg = from_dict({"model": meta["architecture"]}).model
        image_shape = meta["input"].get("image_shape")
        module = build_model(model_cfg, tuple(meta["input"]["shape"]), max(1, len(meta["classes"])),
                             tuple(image_shape) if image_shape else None,
                             tuple(int(c) for c in meta.get("categories") or ()))
    except (KeyError, TypeError, ConfigError) as exc:
        raise RunError(f"{where}: its model description is unusable: {exc}") from None
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise RunError(f"{where}: weights do not fit the described model: {first[:200]}") from None
    return module.eval()


# ----------------------------------------------------------------------------- the model description


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and bytes of the weights: identifies a trained model."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())  # bytes of any dtype, bf16 included
    return h.hexdigest()


def describe(data: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The model description shared by every format (``model.json`` without its ``files``)."""
    info = data["info"]
    shape = [int(s) for s in info["input_shape"]]
    per_channel = len(shape) == 3 and len(info["mean"]) == shape[0]
    return {
        "format": META_FORMAT,
        "version": 1,
        "weights_sha256": weights_digest(data["model"]),
        "architecture": dict(data["config"]["model"]),
        "input": {
            "name": "x",
            "dtype": "float32",
            "shape": shape,
            "batch": "any size, first dimension",
            "features": [str(f) for f in info.get("feature_names") or []],
            "image_shape": info.get("image_shape"),
            "values": "raw features as in the training data (unscaled); images as float in [0, 1], (C, H, W)",
        },
        "preprocessing": {
            "kind": "standardize",
            "formula": "(x - mean) / std",
            "axis": "channel" if per_channel else "feature",
            "mean": [float(m) for m in info["mean"]],
            "std": [float(s) for s in info["std"]],
        },
        "classes": [str(c) for c in info["class_names"]],
        **_table_description(info),
        "source": {
            "run": run_dir.name,
            "dataset": info.get("name"),
            "data_source": data["config"]["data"]["source"],
            "epoch": data.get("epoch"),
            "steps": data.get("steps"),
        },
    }


def _table_description(info: dict[str, Any]) -> dict[str, Any]:
    """A table's task, category features and schema (the preprocessing every export carries)."""
    out: dict[str, Any] = {}
    if info.get("task", "classification") != "classification":
        out["task"] = info["task"]
        out["output"] = {"kind": "number", "name": ((info.get("schema") or {}).get("target") or {}).get("name"),
                         "units": "the target's (un-standardised)"}
    if info.get("schema"):
        out["schema"] = info["schema"]
    if info.get("categories"):
        out["categories"] = [int(c) for c in info["categories"]]
    return out


# ----------------------------------------------------------------------------- reading exports safely


def load_state_dict_file(path: Path) -> dict[str, Any]:
    """A ``.pt`` state dict, loaded with ``weights_only=True``: pickled code is refused, never run."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise RunError(
            f"model: {path} holds pickled objects other than tensors and was refused (weights_only): {first[:160]}"
        ) from None
    except FileNotFoundError:
        raise RunError(f"model: file not found: {path}") from None
    except Exception as exc:
        raise RunError(f"model: {path} is not a readable state dict ({type(exc).__name__})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise RunError(f"model: {path} is not a state dict (a mapping of names to tensors)")
    return state


def _check_meta(meta: Any, where: str) -> dict[str, Any]:
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise RunError(f"{where}: not a TrainDesk model description")
    for key in ("architecture", "input", "preprocessing", "classes"):
        if key not in meta:
            raise RunError(f"{where}: model description lacks {key!r}")
    return meta


def _parse_meta(text: str, where: str) -> dict[str, Any]:
    try:
        return _check_meta(json.loads(text), where)
    except json.JSONDecodeError as exc:
        raise RunError(f"{where}: model description is not valid JSON ({exc.msg})") from None


def sidecar_entry(path: Path) -> dict[str, Any] | None:
    """The ``model.json`` beside ``path`` with ``export`` set to this file's entry, if it lists the file."""
    side = path.parent / SIDECAR
    if not side.is_file():
        return None
    meta = _parse_meta(side.read_text(encoding="utf-8"), str(side))
    entry = (meta.get("files") or {}).get(path.name)
    if entry is None:
        return None
    return {**{k: v for k, v in meta.items() if k != "files"}, "export": entry}


def _safetensors_meta(path: Path) -> dict[str, Any]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as fh:
            embedded = (fh.metadata() or {}).get(META_KEY)
    except Exception as exc:  # safetensors raises its own error types for a corrupt header
        raise RunError(f"model: {path} is not a readable .safetensors file ({type(exc).__name__})") from None
    return _meta_or_sidecar(embedded, path)


def _meta_or_sidecar(embedded: str | None, path: Path) -> dict[str, Any]:
    """The description a model file carries, else the sidecar entry that lists it."""
    if embedded:
        return _parse_meta(embedded, str(path))
    meta = sidecar_entry(path)
    if meta is None:
        raise RunError(f"model: {path} carries no model description and no {SIDECAR} beside it lists it")
    return meta


def _pt2_meta(path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as zf:
            name = next((n for n in zf.namelist() if n.endswith("/extra/" + PT2_EXTRA)), None)
            embedded = zf.read(name).decode("utf-8") if name is not None else None
    except zipfile.BadZipFile:
        raise RunError(f"model: {path} is not a torch.export program (.pt2 archive)") from None
    return _meta_or_sidecar(embedded, path)


def _onnx_session(path: Path, threads: int = 0) -> Any:
    try:
        import onnxruntime as ort
    except ModuleNotFoundError:
        raise UserError(
            f"model: running {path.name} needs onnxruntime, from the optional extra 'onnx': "
            "pip install 'traindesk[onnx]'"
        ) from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # errors only: onnxruntime warns about unused initializers otherwise
    try:
        return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise RunError(f"model: {path} is not a loadable ONNX model: {first[:200]}") from None


def _onnx_meta(session: Any, path: Path) -> dict[str, Any]:
    return _meta_or_sidecar(session.get_modelmeta().custom_metadata_map.get(META_KEY), path)


def is_run_dir(path: Path) -> bool:
    """A run directory (it holds checkpoints/ or its config.toml), not an export folder."""
    return path.is_dir() and ((path / "checkpoints").is_dir() or (path / "config.toml").is_file())


def resolve_model_path(path: Path, checkpoint: str | None = None) -> Path:
    """A model file; a ``model.json`` (or a folder holding one) stands for the first runnable file it lists,
    a run directory for its ``checkpoint`` (best or last; None: best once best.pt exists, else last)."""
    path = Path(path).expanduser()
    if is_run_dir(path):
        from core.checkpoint import checkpoint_file, default_checkpoint

        return checkpoint_file(path, checkpoint or default_checkpoint(path), "predict")
    if checkpoint is not None:
        raise UserError(f"predict: --checkpoint chooses the checkpoint of a run directory; {path} is not one")
    if path.is_dir():
        path = path / SIDECAR
    if path.name.endswith(".json"):
        if not path.is_file():
            raise RunError(f"model: file not found: {path}")
        meta = _parse_meta(path.read_text(encoding="utf-8"), str(path))
        files = [path.parent / name for name in meta.get("files") or {}]
        files.sort(key=lambda p: RUNNABLE_SUFFIXES.index(p.suffix) if p.suffix in RUNNABLE_SUFFIXES else 99)
        runnable = [p for p in files if p.is_file() and p.suffix in RUNNABLE_SUFFIXES]
        if not runnable:
            raise RunError(f"model: {path} lists no model file that exists beside it")
        return runnable[0]
    if not path.is_file():
        raise RunError(f"model: file not found: {path}")
    if path.suffix not in RUNNABLE_SUFFIXES:
        raise RunError(
            f"model: {path} is not an exported model; use a .safetensors (with its model.json), .pt2 or .onnx "
            "file, a run directory or a checkpoint"
        )
    return path


def read_model_meta(path: Path) -> dict[str, Any]:
    """The description of an exported model (classes, input), without building it where possible."""
    path = resolve_model_path(path)
    if path.suffix == ".safetensors":
        return _safetensors_meta(path)
    if path.suffix == ".pt2":
        return _pt2_meta(path)
    if path.suffix == ".onnx":
        return _onnx_meta(_onnx_session(path), path)
    if sidecar_entry(path) is None:
        return checkpoint_meta(path, _load_checkpoint(path))
    return _state_dict_meta(path)


def _state_dict_meta(path: Path) -> dict[str, Any]:
    meta = sidecar_entry(path)
    if meta is None:
        raise RunError(
            f"model: {path} is a bare state dict (no architecture) and no {SIDECAR} beside it lists it; "
            "export safetensors, torch-export or onnx to predict"
        )
    return meta


# ----------------------------------------------------------------------------- predictors


class Predictor:
    """Raw features (numpy float32, batch first) in, class probabilities out."""

    def __init__(self, path: Path, meta: dict[str, Any], run: Callable[[np.ndarray], np.ndarray], output: str) -> None:
        self.path = path
        self.meta = meta
        self.output = output  # what ``run`` returns: "logits" or "probabilities"
        self._run = run

    @property
    def classes(self) -> list[str]:
        """Class names; a regression model's one output is named after its target."""
        return [str(c) for c in self.meta["classes"]] or [str((self.meta.get("output") or {}).get("name")
                                                               or "prediction")]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.meta["input"]["shape"])

    def raw(self, x: np.ndarray) -> np.ndarray:
        """The model's own output (logits or probabilities, see ``output``)."""
        return self._run(x)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities; for a regression model, its prediction in the target's units (one column)."""
        out = self._run(x)
        return softmax(out) if self.output == "logits" and self.meta.get("task") != "regression" else out


def softmax(z: np.ndarray) -> np.ndarray:
    import numpy as np

    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def _torch_runner(module: Callable[[Any], Any]) -> Callable[[np.ndarray], np.ndarray]:
    import torch

    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(x)).detach().numpy()

    return run


def load_safetensors_predictor(path: Path, meta: dict[str, Any] | None = None) -> Predictor:
    """Rebuild the module from the description (embedded, or ``meta`` e.g. from model.json) and the weights."""
    from safetensors.torch import load_file

    meta = meta or _safetensors_meta(path)
    try:
        state = load_file(str(path))
    except Exception as exc:
        raise RunError(f"model: {path} is not a readable .safetensors file ({type(exc).__name__})") from None
    module = standardized(rebuild_module(meta, state, str(path)), meta, "probabilities", str(path))
    return Predictor(path, meta, _torch_runner(module), "probabilities")


def load_state_dict_predictor(path: Path, meta: dict[str, Any] | None = None) -> Predictor:
    meta = meta or _state_dict_meta(path)
    state = load_state_dict_file(path)
    module = standardized(rebuild_module(meta, state, str(path)), meta, "probabilities", str(path))
    return Predictor(path, meta, _torch_runner(module), "probabilities")


def _load_checkpoint(path: Path) -> dict[str, Any]:
    from core.checkpoint import load_checkpoint

    try:
        return load_checkpoint(path)
    except RunError as exc:
        try:
            load_state_dict_file(path)
        except RunError:
            raise exc from None  # neither: the checkpoint's reason
        raise RunError(
            f"model: {path} is a bare state dict (no architecture) and no {SIDECAR} beside it lists it; "
            "export safetensors, torch-export or onnx to predict"
        ) from None


def checkpoint_meta(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The description an export of this checkpoint would carry (``describe``), for prediction in place."""
    from core.checkpoint import check_checkpoint

    where = f"predict: {path}"
    check_checkpoint(data, where)
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    try:
        meta = describe(data, run_dir)
    except (KeyError, TypeError, ValueError) as exc:
        raise RunError(f"{where}: its info is unusable ({type(exc).__name__}: {exc})") from None
    return {**meta, "export": {"format": "checkpoint", "checkpoint": path.stem, "preprocessing_included": False,
                               "input": "standardised features: apply 'preprocessing' first", "output": "logits"}}


def load_checkpoint_predictor(path: Path) -> Predictor:
    """A run's checkpoint, rebuilt and standardised exactly as its .safetensors export would be."""
    data = _load_checkpoint(path)
    meta = checkpoint_meta(path, data)
    module = standardized(rebuild_module(meta, data["model"], str(path)), meta, "probabilities", str(path))
    return Predictor(path, meta, _torch_runner(module), "probabilities")


def load_pt2_predictor(path: Path) -> Predictor:
    import torch

    extra = {PT2_EXTRA: ""}
    try:
        program = torch.export.load(str(path), extra_files=extra)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise RunError(f"model: {path} is not a loadable torch.export program: {first[:200]}") from None
    meta = _parse_meta(extra[PT2_EXTRA], str(path)) if extra[PT2_EXTRA] else _pt2_meta(path)
    return Predictor(path, meta, _torch_runner(program.module()), meta["export"]["output"])


def load_onnx_predictor(path: Path, threads: int = 0) -> Predictor:
    session = _onnx_session(path, threads)
    meta = _onnx_meta(session, path)
    in_name = session.get_inputs()[0].name
    out_name = session.get_outputs()[0].name
    from core.tabular_export import onnx_feed, tabular_schema

    schema = tabular_schema(meta)
    if schema is not None and len(session.get_inputs()) == len(schema.used):  # the raw-column graph

        def run(x: np.ndarray) -> np.ndarray:
            return session.run([out_name], onnx_feed(schema, x))[0]

        return Predictor(path, meta, run, meta["export"]["output"])

    def run(x: np.ndarray) -> np.ndarray:
        return session.run([out_name], {in_name: x})[0]

    return Predictor(path, meta, run, meta["export"]["output"])


def load_predictor(path: Path, threads: int = 0) -> Predictor:
    """Load any runnable export; ``threads`` > 0 caps this process's compute threads."""
    path = resolve_model_path(path)
    if threads > 0 and needs_torch(path):  # an ONNX graph gets its threads from its session: no torch import
        import torch

        torch.set_num_threads(threads)
    if path.suffix == ".safetensors":
        return load_safetensors_predictor(path)
    if path.suffix == ".pt2":
        return load_pt2_predictor(path)
    if path.suffix == ".onnx":
        return load_onnx_predictor(path, threads)
    if sidecar_entry(path) is None:  # a .pt no model.json lists: a run's checkpoint
        return load_checkpoint_predictor(path)
    return load_state_dict_predictor(path)


# ----------------------------------------------------------------------------- inputs


class RowNumbers(Sequence[str]):
    """The ids of rows that have none of their own: their numbers ("0", "1", ...) in the input, each made
    when asked for (a list of 200,000 of them took the calling process 37 ms)."""

    def __init__(self, rows: range) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> RowNumbers: ...

    def __getitem__(self, i: int | slice) -> str | RowNumbers:
        return RowNumbers(self.rows[i]) if isinstance(i, slice) else str(self.rows[i])

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowNumbers({self.rows.start}, {self.rows.stop})"


@dataclass(frozen=True)
class PredictInput:
    """Rows to predict: ids, and either raw features in memory or image files decoded on demand."""

    ids: Sequence[str]
    x: np.ndarray | None = None
    paths: tuple[str, ...] = ()
    labels: list[str] | None = None   # the true classes, when the input has them (a test set)
    image_shape: tuple[int, ...] = ()  # decode images to this (C, H, W); empty: the model's input shape
    pixel_scale: float = 1.0           # decoded pixels are [0, 1]; x 255 for a model trained on 0-255 arrays
    notes: tuple[str, ...] = ()        # what reading it met (a table's unseen category values)

    def __len__(self) -> int:
        return len(self.ids)


LABEL_COLUMNS = ("label", "target", "class", "y")  # a CSV column with the true classes makes a test set


@dataclass(frozen=True)
class _CsvPlan:
    """Which columns of a CSV's header feed the model, name the rows and hold true classes."""

    columns: Any  # core.readers.Columns: the features (numbers), then the id and label columns (text)
    id_col: int | None
    label_col: int | None


class ColumnNamesDiffer(DataError):
    """A CSV has as many feature columns as the model takes, under other names: usable by position."""

    def __init__(self, message: str, expected: list[str], found: list[str]) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


def _names(names: Sequence[str], limit: int = 3) -> str:
    """'a', 'b', 'c' … 'z': the first few names and the last, for a message of one line."""
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" … {names[-1]!r}" if len(names) > limit else "")


def _csv_plan(path: Path, meta: dict[str, Any], header: list[str], by_position: bool = False) -> _CsvPlan:
    """Match the header to the model's features by name; ``by_position`` takes the header's columns (but an
    ``id`` and a label column) in order instead, when the names differ but the count is the same."""
    from core.readers import Columns

    features = [str(f) for f in meta["input"].get("features") or []]
    n_features = math.prod(int(s) for s in meta["input"]["shape"])
    if len(features) != n_features:
        raise DataError(f"predict: the model takes {n_features} values per sample, not CSV columns; give an NPZ")
    index = {name: i for i, name in enumerate(header)}
    missing = [f for f in features if f not in index]
    id_col = index.get("id")
    target = next((c for c in LABEL_COLUMNS if c in index and c not in features), None)
    label_col = index[target] if target else None
    text = [c for c in (id_col, label_col) if c is not None]
    others = [i for i in range(len(header)) if i not in text]  # the columns that could be features
    if missing and by_position and len(others) != n_features:
        raise DataError(f"predict: {path} has {len(others)} feature columns, the model takes {n_features}; "
                        "--by-position needs the same number, in the training order")
    if missing and len(others) == n_features:
        if by_position:
            return _CsvPlan(Columns(numeric=others, text=text), id_col, label_col)
        found = [header[i] for i in others]
        raise ColumnNamesDiffer(
            f"predict: {path} has the model's {n_features} feature columns' count but not their names "
            f"({_names(found)} where the model has {_names(features)}); pass --by-position to use them in order",
            features, found)
    if missing:
        raise DataError(
            f"predict: {path} lacks {len(missing)} of the model's {n_features} feature columns, e.g. "
            + ", ".join(repr(m) for m in missing[:4]) + f"; the model takes {_names(features)}"
        )
    return _CsvPlan(Columns(numeric=[index[f] for f in features], text=text), id_col, label_col)


def read_csv_input(path: Path, meta: dict[str, Any], by_position: bool = False) -> PredictInput:
    """The model's feature columns, by name (or in order), from a CSV; an ``id`` column, if any, names the rows."""
    from core.readers import read_csv

    plans: list[_CsvPlan] = []

    def columns(header: list[str]) -> Any:
        plans.append(_csv_plan(path, meta, header, by_position))
        return plans[-1].columns

    table = read_csv(path, "predict", columns)
    plan = plans[-1]
    x = table.x
    ids = table.text[plan.id_col].tolist() if plan.id_col is not None else RowNumbers(range(x.shape[0]))
    labels = [str(v) for v in table.text[plan.label_col].tolist()] if plan.label_col is not None else None
    return PredictInput(ids, x=x.reshape((x.shape[0], *meta["input"]["shape"])), labels=labels)


def read_npz_input(path: Path, meta: dict[str, Any]) -> PredictInput:
    """Array ``x`` (N, ...) from an NPZ; an ``id``/``ids`` array, if any, names the rows."""
    from core.readers import read_npz

    shape = tuple(int(s) for s in meta["input"]["shape"])
    arrays = read_npz(path, "predict", labels=False)
    x = arrays.x
    if math.prod(x.shape[1:]) != math.prod(shape):
        raise DataError(f"predict: {path}: x has samples of shape {x.shape[1:]}, the model takes {shape}")
    x = x.reshape((x.shape[0], *shape))
    ids = [str(v) for v in arrays.ids.tolist()] if arrays.ids is not None else RowNumbers(range(x.shape[0]))
    return PredictInput(ids, x=x, labels=_npz_labels(path, x.shape[0], meta))


def _npz_labels(path: Path, n: int, meta: dict[str, Any]) -> list[str] | None:
    """The NPZ's ``y`` as class names, if it has one of the right length (a test set)."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as npz:
            key = next((k for k in ("y", "Y", "labels", "label") if k in npz.files), None)
            y = np.asarray(npz[key]) if key else None
    except (OSError, ValueError):
        return None
    if y is None or y.shape[:1] != (n,):
        return None
    return _class_labels(y.reshape(-1).tolist(), [str(c) for c in meta.get("classes") or []])


def _class_labels(values: list[Any], classes: list[str]) -> list[str]:
    """True labels as class names: integers index the classes unless they are class names themselves."""
    names = set(classes)
    out = []
    for v in values:
        text = str(int(v)) if isinstance(v, float) and float(v).is_integer() else str(v)
        if text not in names and isinstance(v, (int, float)) and 0 <= int(v) < len(classes):
            text = classes[int(v)]
        out.append(text)
    return out


def read_image_input(root: Path, meta: dict[str, Any]) -> PredictInput:
    """Every image under ``root`` (recursively, sorted); ids are their paths relative to ``root``."""
    from core.data import IMAGE_SUFFIXES

    shape = [int(s) for s in meta["input"]["shape"]]
    image_shape = [int(s) for s in meta["input"].get("image_shape") or []]
    if len(shape) == 3:
        image_shape = shape
    elif _named_features(meta):
        image_shape = []  # named features (digits' pixel_0_0...): a tabular model, whatever it pictures
    elif len(image_shape) == 2:
        image_shape = [1, *image_shape]
    if len(image_shape) != 3 or math.prod(image_shape) != math.prod(shape):
        raise DataError(
            f"predict: {root} is an image folder but the model takes {math.prod(shape)} tabular features; "
            "give a CSV or NPZ"
        )
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DataError(f"predict: {root} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
    ids = [p.relative_to(root).as_posix() for p in files]
    # A class-folder tree (root/<class>/image) is a labelled test set.
    classes = {str(c) for c in meta.get("classes") or []}
    tops = [i.split("/")[0] if "/" in i else None for i in ids]
    labels = [str(t) for t in tops] if tops and all(t in classes for t in tops) else None
    # A model trained on an array of 0-255 pixels (its mean says so) gets them as it learned them.
    scale = 255.0 if max((abs(float(m)) for m in (meta.get("preprocessing") or {}).get("mean") or [0.0]),
                         default=0.0) > 1.5 else 1.0
    return PredictInput(ids, paths=tuple(str(p) for p in files), labels=labels,
                        image_shape=tuple(image_shape), pixel_scale=scale)


def _named_features(meta: dict[str, Any]) -> bool:
    """Whether the training data named its features (an array's are only numbered f0, f1, ...)."""
    names = [str(f) for f in meta["input"].get("features") or []]
    return bool(names) and names != [f"f{i}" for i in range(len(names))]


def read_input(path: Path, meta: dict[str, Any], by_position: bool = False) -> PredictInput:
    path = Path(path).expanduser()
    if path.is_dir():
        return read_image_input(path, meta)
    if not path.is_file():
        raise DataError(f"predict: input not found: {path}")
    suffix = path.suffix.lower()
    if (meta.get("schema") or {}).get("columns") and suffix in (".csv", ".parquet"):
        from core.tabular_predict import read_table_input

        parts = read_table_input(path, meta)
        if parts["ids"] is None:
            parts["ids"] = RowNumbers(range(len(parts["x"])))
        return PredictInput(**parts)
    if suffix == ".csv":
        return read_csv_input(path, meta, by_position)
    if suffix == ".npz":
        return read_npz_input(path, meta)
    raise DataError(f"predict: {path}: input must be a .csv, a .npz or an image folder")


# ----------------------------------------------------------------------------- predicting and formatting


def _batch(inp: PredictInput, start: int, stop: int, shape: Sequence[int]) -> np.ndarray:
    """Raw rows ``start:stop`` as float32 (decoding images if needed)."""
    import numpy as np

    if inp.paths:
        from core.data import decode_image

        decoded = np.stack([decode_image(p, inp.image_shape or tuple(shape)) for p in inp.paths[start:stop]])
        if inp.pixel_scale != 1.0:
            decoded *= inp.pixel_scale
        return decoded.reshape((len(decoded), *shape))
    assert inp.x is not None
    return np.asarray(inp.x[start:stop], dtype=np.float32)


def predict_chunk(predictor: Predictor, inp: PredictInput, start: int, stop: int,
                  batch_rows: int = BATCH_ROWS) -> tuple[np.ndarray, str]:
    """Probabilities and CSV lines for rows ``start:stop``, in batches of ``batch_rows`` from ``start``."""
    import numpy as np

    out = np.empty((stop - start, len(predictor.classes)), dtype=np.float32)
    for b in range(start, stop, batch_rows):
        e = min(b + batch_rows, stop)
        out[b - start:e - start] = predictor.probabilities(_batch(inp, b, e, predictor.input_shape))
    return out, format_rows(inp.ids[start:stop], out, predictor.classes)


_CSV_SPECIAL = (",", '"', "\r", "\n")


def _csv_field(text: str) -> str:
    """Quoted as the csv module does (QUOTE_MINIMAL) when it holds a comma, a quote or a line break."""
    if any(c in text for c in _CSV_SPECIAL):
        return '"' + text.replace('"', '""') + '"'
    return text


def _csv_fields(texts: Sequence[str]) -> Sequence[str]:
    joined = "\x00".join(texts)  # one scan for the common case: no id needs quoting
    if not any(c in joined for c in _CSV_SPECIAL):
        return texts
    return [_csv_field(t) for t in texts]


def csv_header(classes: Sequence[str]) -> str:
    if len(classes) == 1:  # regression: one predicted number per row, named after the target
        return f"id,{_csv_field(classes[0])}\n"
    return ",".join(["id", "predicted"] + [_csv_field(f"prob_{c}") for c in classes]) + "\n"


def format_rows(ids: Sequence[str], probs: np.ndarray, classes: Sequence[str]) -> str:
    """CSV lines ``id,predicted,prob_...`` for these rows, formatted by pyarrow in C++.

    Each probability is the shortest decimal that reads back as the same
    float32 (``0.61903375``, ``5.7675044e-7``): nothing is lost.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(ids) == 0:
        return ""
    names = pa.array([_csv_field(c) for c in classes], pa.string())
    if isinstance(ids, RowNumbers):  # numbered in C++, not one Python string each
        id_column = pc.cast(pa.array(np.arange(ids.rows.start, ids.rows.stop, ids.rows.step)), pa.string())
    else:
        id_column = pa.array(_csv_fields(ids), pa.string())
    columns = [id_column, pc.take(names, pa.array(probs.argmax(axis=1)))] if len(classes) != 1 else [id_column]
    columns += [pc.cast(pa.array(np.ascontiguousarray(probs[:, j])), pa.string()) for j in range(probs.shape[1])]
    lines = pc.binary_join_element_wise(pc.binary_join_element_wise(*columns, ","), "\n", "")
    _, offsets, data = lines.buffers()  # one string array: its data buffer is the lines end to end
    bounds = np.frombuffer(offsets, np.int32)[lines.offset:lines.offset + len(lines) + 1]
    return memoryview(data)[bounds[0]:bounds[-1]].tobytes().decode("utf-8")


@dataclass
class Predictions:
    """Predicted classes and probabilities for every input row, in input order."""

    ids: Sequence[str]
    classes: list[str]
    probs: np.ndarray
    chunks: list[str]  # the CSV body, already formatted (by the workers when there are several)
    model_path: Path
    workers: int
    seconds: float
    labels: list[str] | None = None  # true classes of a labelled input (a test set)
    notes: tuple[str, ...] = ()      # what reading the input met (unseen category values)

    @property
    def predicted(self) -> list[str]:
        return [self.classes[k] for k in self.probs.argmax(axis=1).tolist()]

    def evaluation(self) -> dict[str, Any] | None:
        """Accuracy, per-class precision/recall/F1 and the confusion matrix against the true labels."""
        if self.labels is None:
            return None
        if len(self.classes) == 1:  # regression: the true values against the predicted ones
            from core.metrics import regression_report

            return regression_report(self.probs[:, 0].astype(float).tolist(), [float(v) for v in self.labels])
        from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

        predicted = self.predicted
        classes = list(self.classes) + sorted(set(self.labels) - set(self.classes))
        precision, recall, f1, support = precision_recall_fscore_support(
            self.labels, predicted, labels=classes, zero_division=0)
        return {
            "n": len(self.labels),
            "accuracy": float(accuracy_score(self.labels, predicted)),
            "confusion": confusion_matrix(self.labels, predicted, labels=classes).tolist(),
            "per_class": [{"class": c, "precision": float(p), "recall": float(r), "f1": float(f),
                           "support": int(n)} for c, p, r, f, n in zip(classes, precision, recall, f1, support)],
        }

    def csv_text(self) -> str:
        return csv_header(self.classes) + "".join(self.chunks)

    def write_csv(self, fh: IO[str]) -> None:
        fh.write(csv_header(self.classes))
        for chunk in self.chunks:
            fh.write(chunk)

    def save(self, path: Path) -> None:
        """Write the CSV atomically: a failed write leaves no partial file."""
        from core.runlog import atomic_write_bytes

        try:
            atomic_write_bytes(path, self.csv_text().encode("utf-8"))
        except OSError as exc:
            raise UserError(f"predict: cannot write {path}: {exc.strerror or exc}") from None


def chunk_bounds(n_rows: int, batch_rows: int = BATCH_ROWS) -> list[tuple[int, int]]:
    """Fixed row ranges of one batch each: the same whatever the worker count, so the output is too."""
    return [(lo, min(lo + batch_rows, n_rows)) for lo in range(0, n_rows, batch_rows)]


def predict(model_path: Path, input_path: Path, workers: int | None = None, batch_rows: int = BATCH_ROWS,
            checkpoint: str | None = None, by_position: bool = False) -> Predictions:
    """Predict every row of ``input_path`` with the exported model (or run directory) at ``model_path``.

    ``checkpoint`` picks a run directory's ``best`` or ``last`` checkpoint (None: best once it exists).
    A CSV's columns are the model's features by name; ``by_position`` takes them in order instead (a
    CSV of the same columns under other names: :class:`ColumnNamesDiffer` says so).

    ``workers`` N runs N processes with one compute thread each (N = 1: this
    process, on one thread), which also format their rows and, for a CSV with
    one line per record, parse them (this process only indexes where rows
    start); results are put back in input order, so the output is the same
    for any N. None: this process on one thread, as N = 1, until the rows
    left repay a pool of one process per CPU core (``_AutoPool``).
    """
    if workers is not None and (workers < 1 or workers > MAX_WORKERS):
        raise UserError(f"predict: --workers must be from 1 to {MAX_WORKERS}, got {workers}")
    t0 = time.perf_counter()
    model_path = resolve_model_path(Path(model_path), checkpoint)
    input_path = Path(input_path).expanduser()
    automatic = workers is None
    processes = workers or 1
    if automatic:  # this process, and a pool only once the work it measured says a pool repays its start
        cores = worker_limit()
        processes = cores if cores > 1 and _looks_large(input_path, batch_rows) else 1
    if processes > 1:  # no more processes than batches (the pool starts before the input is read: an estimate,
        guess = _estimated_rows(input_path, processes * batch_rows)  # taken twice over, rows vary in length)
        processes = processes if guess is None else max(1, min(processes, math.ceil(2 * guess / batch_rows)))
    with contextlib.ExitStack() as stack:
        if processes > 1 and not automatic:
            runner = _Runner(model_path, processes, stack)
            runner.start_pool()  # they start loading the model now, while this process reads the input
            meta = read_model_meta(model_path)
        else:
            if needs_torch(model_path):
                stack.enter_context(_compute_threads(1))
            predictor = load_predictor(model_path, threads=1)
            meta = predictor.meta
            rows_guess = _estimated_rows(input_path, 1 << 40) if processes > 1 else None
            auto = _AutoPool(rows_guess, processes) if rows_guess else None
            if auto is not None:
                stack.callback(auto.close)
            runner = _Runner(model_path, processes, stack, predictor, auto=auto)
        rows = None
        if input_path.suffix.lower() == ".csv" and input_path.is_file() \
                and not (meta.get("schema") or {}).get("columns"):  # a table's columns are encoded whole
            rows = _predict_csv_pieces(runner, input_path, meta, batch_rows, by_position)
        if rows is None:
            rows = _predict_input(runner, input_path, meta, batch_rows, by_position)
    import numpy as np

    classes = [str(c) for c in meta["classes"]] or [str((meta.get("output") or {}).get("name") or "prediction")]
    probs = np.concatenate(rows.probs) if rows.probs else np.empty((0, len(classes)), np.float32)
    return Predictions(rows.ids, classes, probs, rows.texts, model_path, rows.workers,
                       time.perf_counter() - t0, rows.labels, rows.notes)


@dataclass
class _Rows:
    """What the pieces of an input gave, in input order."""

    ids: Sequence[str]
    probs: list[np.ndarray]
    texts: list[str]
    labels: list[str] | None
    workers: int
    notes: tuple[str, ...] = ()


def _predict_input(runner: _Runner, input_path: Path, meta: dict[str, Any], batch_rows: int,
                   by_position: bool = False) -> _Rows:
    """Read the whole input here, then predict fixed batches of it (in the pool, or in this process)."""
    inp = read_input(input_path, meta, by_position)
    _check_shape(inp, meta, input_path)
    chunks = chunk_bounds(len(inp), batch_rows)
    stored = _stored_x(input_path, inp) if runner.processes > 1 else None  # the processes read their rows of
                                                                              # the file, not sent them

    def part(lo: int, hi: int) -> PredictInput:
        return PredictInput(inp.ids[lo:hi], x=None if inp.x is None or stored else inp.x[lo:hi],
                            paths=inp.paths[lo:hi], image_shape=inp.image_shape, pixel_scale=inp.pixel_scale)

    with _progress(len(inp)) as bar:
        results = runner.run(
            chunks, bar,
            here=lambda c: predict_chunk(runner.predictor(), inp, c[0], c[1], batch_rows),
            task=lambda c: (_predict_task, (part(*c), c[0], c[1], batch_rows, stored)))
    assert results is not None  # these tasks never give None
    return _Rows(inp.ids, [r[0] for r in results], [r[1] for r in results], inp.labels, runner.used(), inp.notes)


PIECE_BATCHES = 4      # a CSV piece (what one process parses and predicts at a time) is at most this many batches
PIECES_PER_WORKER = 4  # and pieces are cut small enough that each worker gets several: the last ones even out
TAIL_BATCHES = 2       # batches per worker at the end of the input that go out one at a time


def _predict_csv_pieces(runner: _Runner, path: Path, meta: dict[str, Any], batch_rows: int,
                        by_position: bool = False) -> _Rows | None:
    """A CSV with one line per record, cut into pieces of whole batches that are parsed where they are
    predicted, in the pool while this process goes on cutting; None when it must be read whole (quotes,
    blank lines, or a value whose error the whole read reports)."""
    from core.readers import csv_split

    plans: list[_CsvPlan] = []

    def columns(header: list[str]) -> Any:
        plans.append(_csv_plan(path, meta, header, by_position))
        return plans[-1].columns

    split = csv_split(path, columns)
    if split is None:
        return None
    plan = plans[-1]
    estimate = _estimated_rows(path, 0) or 1  # before the scan: it sizes the pieces
    workers = runner.processes
    per_worker = math.ceil(estimate / batch_rows / (workers * PIECES_PER_WORKER))
    step = batch_rows * max(1, min(PIECE_BATCHES, per_worker))  # whole batches: the same batches as a whole read
    # the last pieces (about TAIL_BATCHES batches per worker) are one batch each: the processes end together
    tail = min(0.5, TAIL_BATCHES * workers * batch_rows / max(estimate, 1)) if workers > 1 else 0.0
    cut = {"tail_rows": batch_rows, "tail_bytes": int(tail * (split.data_end - split.data_start))}
    extra = (plan.id_col, plan.label_col, batch_rows)
    with _progress(estimate) as bar:
        results = runner.run(
            split.pieces(step, **cut), bar,
            here=lambda piece: _predict_piece(runner.predictor(), piece, *extra),
            task=lambda piece: (_piece_task, (piece, *extra)),
            void=lambda: split.whole)
        if split.whole or results is None:
            return None
    ids = [i for r in results for i in r[2]] if plan.id_col is not None else RowNumbers(range(split.n_rows))
    labels = [v for r in results for v in r[3]] if plan.label_col is not None else None
    return _Rows(ids, [r[0] for r in results], [r[1] for r in results], labels, runner.used())


def _predict_piece(predictor: Predictor, piece: Any, id_col: int | None, label_col: int | None,
                   batch_rows: int) -> tuple[np.ndarray, str, list[str], list[str]] | None:
    """Parse one CSV piece (core.readers.CsvRows) on this thread and predict it: probabilities, CSV lines,
    the id column's values and the true labels (empty when the CSV has none); None if it needs the whole read."""
    from core.readers import read_csv_rows

    table = read_csv_rows(piece)
    if table is None:
        return None
    rows = range(piece.first, piece.first + piece.count)
    ids = table.text[id_col].tolist() if id_col is not None else RowNumbers(rows)
    inp = PredictInput(ids, x=table.x.reshape((piece.count, *predictor.input_shape)))
    probs, text = predict_chunk(predictor, inp, 0, piece.count, batch_rows)
    labels = [str(v) for v in table.text[label_col].tolist()] if label_col is not None else []
    return probs, text, ids if id_col is not None else [], labels


MAX_WORKERS = 256
AUTO_POOL_BATCHES = 16  # an automatic worker count considers a pool from this many batches of rows on
AUTO_POOL_IMAGE_BATCHES = 2  # or of images, whose decoding is slow Python work a pool spreads


def worker_limit() -> int:
    """The most ``--workers`` that make sense here: this process's usable cores, at most MAX_WORKERS."""
    from core.machine import usable_cores

    return max(1, min(MAX_WORKERS, usable_cores()))


def _looks_large(path: Path, batch_rows: int) -> bool:
    """Whether an input probably holds enough rows for a pool, judged without reading it all."""
    enough = batch_rows * (AUTO_POOL_IMAGE_BATCHES if path.is_dir() else AUTO_POOL_BATCHES)
    return (_estimated_rows(path, enough) or 0) >= enough


def _estimated_rows(path: Path, cap: int) -> int | None:
    """About how many rows an input holds (counted up to ``cap`` for an image folder), without reading it all;
    None when that cannot be told this way (reading the input then says what is wrong, if anything).

    An image folder by its image files; an NPZ by the shape in its ``x``
    header; a CSV by its size over its first row's length.
    """
    try:
        if path.is_dir():
            from core.data import IMAGE_SUFFIXES

            images = (f for f in path.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES)
            return sum(1 for _ in zip(range(cap), images))
        if path.suffix.lower() == ".npz":
            import numpy as np

            with zipfile.ZipFile(path) as zf, zf.open("x.npy") as fh:
                major, _ = np.lib.format.read_magic(fh)
                read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                shape = read_header(fh)[0]
            return int(shape[0]) if shape else None
        with path.open("rb") as fh:
            header = len(fh.readline(1 << 20))
            line = len(fh.readline(1 << 20)) or header or 1  # the first row's length, else the header's
        return max(0, path.stat().st_size - header) // line
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None


@contextlib.contextmanager
def _compute_threads(threads: int) -> Iterator[None]:
    """Cap torch's compute threads in this process for a while (0: leave them), then put them back."""
    if threads <= 0:
        yield
        return
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _progress(total: int) -> Any:
    from core.progress import progress

    return progress(total, "predict", unit="rows", unit_scale=True)


def _check_shape(inp: PredictInput, meta: dict[str, Any], path: Path) -> None:
    shape = tuple(int(s) for s in meta["input"]["shape"])
    if inp.x is not None and tuple(inp.x.shape[1:]) != shape:
        raise DataError(f"predict: {path}: samples have shape {tuple(inp.x.shape[1:])}, the model takes {shape}")


# ----------------------------------------------------------------------------- the process pool


# what a pool process needs, imported once by the forkserver: a CSV piece parsed and its rows formatted
# (pyarrow alone takes 0.13 s to import), and the model's runtime: onnxruntime for an ONNX graph (torch is
# not imported at all then: 1.3-2.5 s of the pool's start here), torch and the model builders otherwise
PREDICT_PRELOAD = ["core.predict", "core.readers", "core.lifeline", "core.machine", "pyarrow.csv", "pyarrow.compute"]
RUNTIME_PRELOAD = {"onnx": ["onnxruntime"], "torch": ["torch", "core.models", "core.checkpoint", "safetensors.torch"]}


def needs_torch(model_path: Path) -> bool:
    """Whether running this (resolved) model file needs torch: everything but an ONNX graph."""
    return Path(model_path).suffix != ".onnx"


def runtime(model_path: Path) -> str:
    return "torch" if needs_torch(model_path) else "onnx"


def predict_preload(model_path: Path) -> list[str]:
    """The modules a pool process for this model imports, preloaded once by the forkserver."""
    return PREDICT_PRELOAD + RUNTIME_PRELOAD[runtime(model_path)]
_worker_predictor: Predictor | None = None
_worker_error: BaseException | None = None


def _init_worker(model_path: str, parent_pid: int) -> None:
    """Pool process start: one compute thread, the model loaded once for every batch it gets."""
    global _worker_predictor, _worker_error
    from core.lifeline import die_with_parent
    from core.machine import keep_freed_memory

    die_with_parent(parent_pid)
    keep_freed_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent ends us cleanly
    try:
        _worker_predictor = load_predictor(Path(model_path), threads=1)
    except BaseException as exc:  # reported by the first batch: an initializer error would only break the pool
        _worker_error = exc


def _ready() -> None:
    if _worker_error is not None:
        raise _worker_error


def _in_worker(start: int, stop: int, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(predictor, *args)`` in a pool process; an unexpected error comes back as one line."""
    _ready()
    assert _worker_predictor is not None
    try:
        return fn(_worker_predictor, *args)
    except UserError:
        raise
    except Exception as exc:  # the parent reports it as one line
        first = (str(exc).splitlines() or [""])[0]
        raise RuntimeError(f"predict: rows {start}-{stop}: {type(exc).__name__}: {first[:200]}") from None


def _predict_task(inp: PredictInput, start: int, stop: int, batch_rows: int,
                  stored: Any = None) -> tuple[np.ndarray, str]:
    """One batch in a pool process; ``inp`` holds just this batch's rows (ids, features or paths), or
    ``stored`` (core.readers.StoredArray) says where in the input file its features are."""
    if stored is not None:
        inp = replace(inp, x=_in_worker(start, stop, _stored_rows, stored, start, stop))
    return _in_worker(start, stop, predict_chunk, inp, 0, stop - start, batch_rows)


def _stored_rows(predictor: Predictor, stored: Any, start: int, stop: int) -> np.ndarray:
    return stored.rows(start, stop).reshape((stop - start, *predictor.input_shape))


def _stored_x(path: Path, inp: PredictInput) -> Any:
    """Where the input file keeps the features just read, uncompressed (np.savez), or None."""
    if inp.x is None or path.suffix.lower() != ".npz":
        return None
    from core.readers import stored_npz_x

    stored = stored_npz_x(path)
    if stored is None or stored.shape[0] != len(inp) or math.prod(stored.shape[1:]) != math.prod(inp.x.shape[1:]):
        return None
    return stored


def _piece_task(piece: Any, id_col: int | None, label_col: int | None, batch_rows: int) -> Any:
    """One CSV piece in a pool process, parsed there (see ``_predict_piece``)."""
    return _in_worker(piece.first, piece.first + piece.count, _predict_piece, piece, id_col, label_col, batch_rows)


@contextlib.contextmanager
def _pool(model_path: Path, workers: int) -> Iterator[Any]:
    """A pool of ``workers`` processes, each started at once and loading the model while the caller reads."""
    from concurrent.futures import ProcessPoolExecutor

    from core.launchers import local as launcher

    # the forkserver boots with what this model needs alone (inference needs neither torch._dynamo nor, for
    # ONNX, torch), unless a training run of this process started it already; no tensors pass: no torch here
    launcher.warm_up(preload=predict_preload(model_path), tensors=False)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=launcher.get_context(tensors=False),
                               initializer=_init_worker, initargs=(str(model_path), os.getpid()))
    try:
        for _ in range(workers):  # a process starts per task submitted while none is idle: all of them now
            pool.submit(_ready)
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # a failed batch makes the rest pointless
        raise
    pool.shutdown(wait=True)


class _Runner:
    """Where an input's pieces are predicted, in input order: a pool started at once (``--workers N``), this
    process alone, or this process until the work it measured repays a pool (``auto``), which then takes
    the rest. Whichever it is, the pieces and so the output are the same."""

    def __init__(self, model_path: Path, processes: int, stack: contextlib.ExitStack,
                 predictor: Predictor | None = None, auto: _AutoPool | None = None) -> None:
        self.model_path = model_path
        self.processes = processes  # what the pieces are cut for
        self._stack = stack
        self._predictor = predictor
        self.auto = auto
        self.pool: Any = None
        self._pooled = 0  # pieces the pool predicted

    def predictor(self) -> Predictor:
        if self._predictor is None:  # the input is one batch after all (a pool was started for more)
            self._predictor = load_predictor(self.model_path)
        return self._predictor

    def start_pool(self) -> Any:
        self.pool = self._stack.enter_context(_pool(self.model_path, self.processes))
        return self.pool

    def used(self) -> int:
        """The processes that predicted: 1 (this one) or the pool's, at most one per piece it had."""
        return max(1, min(self.processes, self._pooled)) if self._pooled else 1

    def run(self, items: Iterable[Any], bar: Any, here: Callable[[Any], Any],
            task: Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]],
            void: Callable[[], bool] = lambda: False) -> list[Any] | None:
        """``here(item)`` in this process or ``task(item)``'s call in the pool for each item, results in
        order, ``bar`` advanced by each result's rows; None as soon as one gives None."""
        items = iter(items)
        results: list[Any] = []
        if self.pool is None:
            for item in items:
                began = time.perf_counter()
                result = here(item)
                if result is None:
                    return None
                results.append(result)
                bar.update(len(result[0]))
                if self.auto is not None and self.auto.hand_over(self, len(result[0]), time.perf_counter() - began):
                    break
        if self.pool is None:
            return results
        futures = [self.pool.submit(fn, *args) for fn, args in map(task, items)]
        self._pooled = len(futures)
        rest = _gather(futures, bar, void())
        return None if rest is None else results + rest


AUTO_MEASURE_S = 0.3   # this process predicts this long before it judges the work left
AUTO_REPAY = 2.0       # a pool is started when it would save this many times its start-up
POOL_START_S = {"onnx": 1.5, "torch": 3.0}  # a pool's start-up until it is measured here (forkserver cold)


class _AutoPool:
    """The automatic worker count: this process predicts and measures its rate; when the rows left would
    take long enough that ``processes`` processes save ``AUTO_REPAY`` times the pool's start-up (as last
    measured on this machine, kept in the user's cache) and the other cores are not busy with other work
    (the load average), a pool starts, on a thread: starting a process
    waits until the forkserver has imported its preloads (seconds, with torch). This process goes on
    predicting meanwhile, and hands the pool the rest once every process has loaded the model. So a pool
    is never waited for, and a small input never starts one."""

    def __init__(self, total_rows: int, processes: int) -> None:
        self.total_rows = total_rows
        self.processes = processes
        self.rows = 0
        self.seconds = 0.0
        self.decided = False
        self._thread: threading.Thread | None = None
        self._pool: Any = None       # the context manager of the pool, once the thread made it
        self._executor: Any = None
        self._ready: list[Any] = []
        self._started = 0.0

    def hand_over(self, runner: _Runner, rows: int, seconds: float) -> bool:
        """Account a piece this process predicted; True once the pool (``runner.pool``) is ready for the rest."""
        self.rows += rows
        self.seconds += seconds
        if not self.decided:
            if self.seconds >= AUTO_MEASURE_S:
                self._decide(runner)
            return False
        if self._thread is None or self._thread.is_alive() or self._executor is None:
            return False  # not asked for, still starting, or it could not start (this process goes on)
        if not all(f.done() for f in self._ready):
            return False
        remember_pool_start(runtime(runner.model_path), time.perf_counter() - self._started)
        runner.pool = self._executor
        return True

    def _decide(self, runner: _Runner) -> None:
        self.decided = True
        if busy_cores() > self.processes - 0.5:  # other work holds the other cores: a pool would share them
            return                                 # (2 workers on a loaded 2-core machine ran 0.69-1.10x)
        left_s = max(0, self.total_rows - self.rows) * self.seconds / max(self.rows, 1)
        if left_s * (1 - 1 / self.processes) < AUTO_REPAY * pool_start_s(runtime(runner.model_path)):
            return
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._start, args=(runner.model_path,), name="traindesk-pool-start",
                                        daemon=True)
        self._thread.start()

    def _start(self, model_path: Path) -> None:
        try:
            pool = _pool(model_path, self.processes)
            executor = pool.__enter__()
            self._pool = pool
            self._ready = [executor.submit(_ready) for _ in range(self.processes)]  # done once every process is up
            self._executor = executor
        except Exception:  # noqa: BLE001 - no pool: this process predicts the rest, as it would have anyway
            return

    def close(self) -> None:
        """Wait for a pool still starting, and end it (its processes are idle by now)."""
        if self._thread is not None:
            self._thread.join()
        if self._pool is not None:
            self._pool.__exit__(None, None, None)
            self._pool = self._executor = None


def busy_cores() -> float:
    """How many cores are busy now, this process included (the 1-minute load average; 0 where unknown)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return 0.0


def _start_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traindesk" / "predict-pool.json"


def pool_start_s(kind: str) -> float:
    """A prediction pool's start-up for this runtime ("onnx", "torch"): as last measured here, else a guess."""
    try:
        kept = json.loads(_start_file().read_text(encoding="utf-8")).get(kind)
        if isinstance(kept, (int, float)) and 0 <= kept < 3600:
            return float(kept)
    except (OSError, ValueError, AttributeError):
        pass
    return POOL_START_S[kind]


def remember_pool_start(kind: str, seconds: float) -> None:
    """Keep a measured pool start-up for the next automatic choice; a cache that cannot be written is skipped."""
    from core.runlog import atomic_write_json

    path = _start_file()
    try:
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
            kept = kept if isinstance(kept, dict) else {}
        except (OSError, ValueError):
            kept = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {**kept, kind: round(seconds, 3)})
    except OSError:
        pass


def _gather(futures: list[Any], bar: Any, cancel: bool = False) -> list[Any] | None:
    """The futures' results in their order, advancing ``bar`` by each result's rows; None as soon as one
    gives None (or at once when ``cancel``), the others cancelled."""
    from concurrent.futures import as_completed
    from concurrent.futures.process import BrokenProcessPool

    order = {future: k for k, future in enumerate(futures)}
    results: list[Any] = [None] * len(futures)
    try:
        for future in [] if cancel else as_completed(order):
            k = order[future]
            results[k] = future.result()
            if results[k] is None:
                cancel = True
                break
            bar.update(len(results[k][0]))
    except BrokenProcessPool:
        raise RuntimeError("predict: a worker process died (killed, or out of memory?)") from None
    if cancel:
        for future in futures:
            future.cancel()
        return None
    return results
