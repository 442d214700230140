"""``.onnx``: a graph with the standardisation inside, run by onnxruntime alone (no torch when predicting).

A table's graph takes the raw columns (``core.services.formats.tabular``): it is fed columns, not the encoded row.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ModelFileError, RunError, UserError
from core.services.formats.base import ModelFormat, example_batch, first_line, quiet_exporters
from core.services.formats.description import META_KEY, embedded, file_entry, meta_or_sidecar
from core.services.formats.module import standardized
from core.services.formats.predictor import Predictor

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

EXTRA_MODULES = ("onnx", "onnxscript")  # what the exporter needs: the optional extra 'onnx'
EXTRA_HINT = "pip install 'traindesk[onnx]' (onnx, onnxscript, onnxruntime)"


def missing_extra() -> str | None:
    """The missing module of the 'onnx' extra, or None (checked without importing it)."""
    return next((m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None), None)


def require_extra() -> None:
    """The exporter needs onnx and onnxscript; say which extra to install when they are missing."""
    for module in EXTRA_MODULES:
        try:
            __import__(module)
        except ModuleNotFoundError:
            raise UserError(
                f"export: format onnx needs the optional extra 'onnx' (module {module!r} is missing): {EXTRA_HINT}"
            ) from None


def onnx_session(path: Path, threads: int = 0) -> Any:
    """An onnxruntime session on the CPU, ``threads`` compute threads (0: its default)."""
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
        raise ModelFileError(f"model: {path} is not a loadable ONNX model: {first[:200]}") from None


def _session_meta(session: Any, path: Path) -> dict[str, Any]:
    return meta_or_sidecar(session.get_modelmeta().custom_metadata_map.get(META_KEY), path)


class OnnxFormat(ModelFormat):
    name = "onnx"
    suffix = ".onnx"
    label = "ONNX (.onnx)"
    graph = True
    runtime = "onnx"
    takes_raw_columns = True

    def read_meta(self, path: Path) -> dict[str, Any]:
        return _session_meta(onnx_session(path), path)

    def load(self, path: Path, threads: int = 0, meta: dict[str, Any] | None = None) -> Predictor:
        from core.services.formats.tabular import onnx_feed, tabular_schema

        session = onnx_session(path, threads)
        meta = meta or _session_meta(session, path)
        in_name = session.get_inputs()[0].name
        out_name = session.get_outputs()[0].name
        schema = tabular_schema(meta)
        if schema is not None and len(session.get_inputs()) == len(schema.used):  # the raw-column graph

            def run_raw(x: np.ndarray) -> np.ndarray:
                return session.run([out_name], onnx_feed(schema, x))[0]

            return Predictor(path, meta, run_raw, meta["export"]["output"])

        def run(x: np.ndarray) -> np.ndarray:
            return session.run([out_name], {in_name: x})[0]

        return Predictor(path, meta, run, meta["export"]["output"])

    def write(self, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
        import torch

        from core.services.formats.tabular import add_raw_columns, tabular_schema

        require_extra()
        graph = standardized(model, desc, output, "export")
        try:
            with quiet_exporters():
                program = torch.onnx.export(
                    graph,
                    (example_batch(raw),),
                    None,
                    dynamo=True,
                    verbose=False,
                    input_names=["x"],
                    output_names=[file_entry(self, output, desc)["output_name"]],
                    dynamic_shapes=({0: torch.export.Dim("batch")},),
                )
        except Exception as exc:
            raise RunError(f"export: the ONNX exporter cannot convert this model: {first_line(exc)}") from None
        assert program is not None
        program.model.metadata_props[META_KEY] = embedded(self, desc, output)
        # one self-contained file: our models are far below protobuf's 2 GB limit
        program.save(str(path), external_data=False)
        schema = tabular_schema(desc)
        if schema is not None:  # a table's model takes its raw columns: the schema's lookups and fills go in front
            try:
                add_raw_columns(str(path), schema)
            except Exception as exc:
                raise RunError(
                    f"export: cannot put the table's preprocessing into the ONNX graph: {first_line(exc)}"
                ) from None

    def reload(
        self, path: Path, desc: dict[str, Any], output: str, raw: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray | None, str]:
        """onnxruntime when installed, else onnx's reference evaluator (slow, exact semantics).

        A table's graph takes raw columns: it is fed the columns (strings, NaN) that encode to ``raw``, values at
        the outlier fences moved past them."""
        from core.services.formats.tabular import onnx_feed, tabular_schema

        x = raw.numpy()
        schema = tabular_schema(desc or {})

        def feed(rows: np.ndarray, name: str = "x") -> dict[str, Any]:
            return onnx_feed(schema, rows, beyond_fences=True) if schema is not None else {name: rows}

        try:
            import onnxruntime  # noqa: F401 - only whether it is installed: the reference evaluator stands in otherwise
        except ModuleNotFoundError:
            from onnx.reference import ReferenceEvaluator

            ref: Any = ReferenceEvaluator(str(path))
            return ref.run(None, feed(x))[0], ref.run(None, feed(x[:1]))[0], "onnx.reference (no onnxruntime)"
        session = onnx_session(path)
        name = session.get_inputs()[0].name
        return session.run(None, feed(x, name))[0], session.run(None, feed(x[:1], name))[0], "onnxruntime"


ONNX = OnnxFormat()
