"""The model description every format carries: ``model.json`` and the metadata embedded in each file.

``describe`` makes it from a checkpoint (architecture, input, standardisation, classes, a table's
schema, where it came from); ``file_entry`` says what one exported file takes and returns; the
readers check a description found in a file or in the ``model.json`` beside it. Torch-free but
``weights_digest``, which hashes tensors it is given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ModelFileError

if TYPE_CHECKING:
    import torch

    from core.services.formats.base import ModelFormat

META_KEY = "traindesk.model"  # metadata key in .safetensors / .onnx; extra file name in .pt2
PT2_EXTRA = "traindesk.model.json"
META_FORMAT = "traindesk.model"
SIDECAR = "model.json"


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
            **({"image_prep": info["image_prep"]} if info.get("image_prep") else {}),
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
        out["output"] = {
            "kind": "number",
            "name": ((info.get("schema") or {}).get("target") or {}).get("name"),
            "units": "the target's (un-standardised)",
        }
    if info.get("schema"):
        out["schema"] = info["schema"]
    if info.get("categories"):
        out["categories"] = [int(c) for c in info["categories"]]
    if info.get("texts"):
        out["texts"] = [int(k) for k in info["texts"]]
    return out


def file_entry(fmt: ModelFormat, output: str, desc: dict[str, Any] | None = None) -> dict[str, Any]:
    """What one exported file takes and returns (``desc``: a table's schema and task change both)."""
    returns = fmt.output_of(output)
    entry = {
        "format": fmt.name,
        "preprocessing_included": fmt.graph,
        "input": "raw features" if fmt.graph else "standardised features: apply 'preprocessing' first",
        "output": returns,
        "output_name": returns,
        "output_shape": ["batch", "classes"],
    }
    if desc is not None:
        from core.services.formats.tabular import table_entry

        entry = table_entry(fmt.graph, fmt.takes_raw_columns, entry, desc)
    return entry


def embedded(fmt: ModelFormat, desc: dict[str, Any], output: str) -> str:
    """The description a file of ``fmt`` carries inside it, as JSON."""
    return json.dumps({**desc, "export": file_entry(fmt, output, desc)})


def merged_sidecar(dest_dir: Path, desc: dict[str, Any], name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """``model.json`` for ``dest_dir``: other files of the same model are kept, another model's are dropped."""
    files: dict[str, Any] = {}
    try:
        old = json.loads((dest_dir / SIDECAR).read_text(encoding="utf-8"))
        if old.get("weights_sha256") == desc["weights_sha256"]:
            files = {k: v for k, v in (old.get("files") or {}).items() if (dest_dir / k).exists()}
    except (OSError, ValueError, AttributeError):
        pass
    files[name] = entry
    return {**desc, "files": files}


# ----------------------------------------------------------------------------- reading a description


def check_meta(meta: Any, where: str) -> dict[str, Any]:
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise ModelFileError(f"{where}: not a TrainDesk model description")
    for key in ("architecture", "input", "preprocessing", "classes"):
        if key not in meta:
            raise ModelFileError(f"{where}: model description lacks {key!r}")
    return meta


def parse_meta(text: str, path: Path) -> dict[str, Any]:
    """The description ``path`` (a model file, or its ``model.json``) carries, checked; a fine-tuned text
    encoder kept beside the model named by its folder there."""
    try:
        return in_folder(check_meta(json.loads(text), str(path)), Path(path).parent)
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{path}: model description is not valid JSON ({exc.msg})") from None


def in_folder(meta: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``meta`` as read from ``folder`` (a run directory, an export's folder): the schema's encoder named
    relative to the model named by its folder there (``core.schema.sentences.located``)."""
    if not meta.get("schema"):
        return meta
    from core.schema.sentences import located

    return {**meta, "schema": located(meta["schema"], folder)}


def read_sidecar(path: Path) -> dict[str, Any]:
    """A ``model.json`` file, checked."""
    return parse_meta(path.read_text(encoding="utf-8"), path)


def sidecar_entry(path: Path) -> dict[str, Any] | None:
    """The ``model.json`` beside ``path`` with ``export`` set to this file's entry, if it lists the file."""
    side = path.parent / SIDECAR
    if not side.is_file():
        return None
    meta = read_sidecar(side)
    entry = (meta.get("files") or {}).get(path.name)
    if entry is None:
        return None
    return {**{k: v for k, v in meta.items() if k != "files"}, "export": entry}


def meta_or_sidecar(embedded_text: str | None, path: Path) -> dict[str, Any]:
    """The description a model file carries, else the sidecar entry that lists it."""
    if embedded_text:
        return parse_meta(embedded_text, path)
    meta = sidecar_entry(path)
    if meta is None:
        raise ModelFileError(f"model: {path} carries no model description and no {SIDECAR} beside it lists it")
    return meta


def bare_state_dict_error(path: Path) -> ModelFileError:
    return ModelFileError(
        f"model: {path} is a bare state dict (no architecture) and no {SIDECAR} beside it lists it; "
        "export safetensors, torch-export or onnx to predict"
    )
