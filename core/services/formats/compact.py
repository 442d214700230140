"""Small exports: ``onnx-int8``, an ONNX graph with int8 weights and activations, calibrated on the run's data;
``executorch`` and ``executorch-int8``, a ``.pte`` program for phones and small boards (XNNPACK).

ONNX Runtime's static quantization in QDQ form: every weight quantized per output channel (a depthwise
convolution's few weights per channel, or a layer with one large row, would lose the rest to a per-tensor
scale), activations per tensor from MinMax ranges measured on a sample of the run's own training split,
decoded and preprocessed as the model sees it (``calibration`` rows, handed to ``write`` as the rows to
trace). The float graph is written first, as ``onnx`` writes it (a table's raw-column lookups in front),
and quantized whole: what ``predict``, ``serve`` and onnxruntime run is one ``.onnx`` file, read by the
``onnx`` format. What it costs is measured by the export on the validation split (``core.services.export``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ModelFileError, RunError, UserError
from core.services.formats.base import ModelFormat, example_batch, first_line, quiet_exporters
from core.services.formats.description import META_KEY, embedded, meta_or_sidecar
from core.services.formats.onnx import ONNX, OnnxFormat
from core.services.formats.predictor import Predictor
from core.services.formats.table_graph import raw_rows_from_encoded, raw_rows_runner, with_table_rows
from core.services.formats.tabular import tabular_schema

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

CALIBRATION_ROWS = 256  # training rows the activation ranges are measured on
CALIBRATION_BATCH = 32
# the operators whose weights are quantized (with their inputs): the layers and an embedding's table; a
# table's preprocessing (lookups, fills, a text's bucket numbers, the standardisation) stays float, where a
# per-tensor int8 range over bucket numbers and years would erase them
QUANTIZED_OPS = ["Conv", "ConvTranspose", "MatMul", "Gemm", "Gather"]
PER_CHANNEL = True  # one int8 scale per output channel of a weight


class _DropAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing" not in record.getMessage()


class _Feeds:
    """onnxruntime's CalibrationDataReader over the calibration rows, as the graph takes them."""

    def __init__(self, feeds: list[dict[str, Any]]) -> None:
        self.feeds = iter(feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self.feeds, None)


def calibration_feeds(desc: dict[str, Any], raw: np.ndarray, input_name: str) -> list[dict[str, Any]]:
    """The calibration rows in batches, as the graph's inputs (a table's raw columns)."""
    from core.services.formats.tabular import onnx_feed, tabular_schema

    schema = tabular_schema(desc)
    out = []
    for lo in range(0, len(raw), CALIBRATION_BATCH):
        rows = raw[lo : lo + CALIBRATION_BATCH]
        out.append(onnx_feed(schema, rows) if schema is not None else {input_name: rows})
    return out


class OnnxInt8Format(OnnxFormat):
    name = "onnx-int8"
    stem = "model-int8"
    label = "ONNX int8 (.onnx, quantized)"
    lossy = True
    calibrates = True

    def write(self, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
        import onnx
        from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

        float_path = path.with_name(path.stem + ".float.onnx")
        ONNX.write(model, desc, float_path, output, raw)
        graph = onnx.load(str(float_path))
        input_name = graph.graph.input[0].name
        feeds = calibration_feeds(desc, raw.numpy(), input_name)
        root = logging.getLogger()
        advice = _DropAdvice()
        root.addFilter(advice)  # onnxruntime advises a pre-processing pass on the root logger: not the user's concern
        try:
            quantize_static(
                str(float_path),
                str(path),
                _Feeds(feeds),
                quant_format=QuantFormat.QDQ,
                per_channel=PER_CHANNEL,
                weight_type=QuantType.QInt8,
                activation_type=QuantType.QUInt8,
                calibrate_method=CalibrationMethod.MinMax,
                op_types_to_quantize=QUANTIZED_OPS,
                extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
            )
        except Exception as exc:
            raise RunError(f"export: onnxruntime cannot quantize this model to int8: {first_line(exc)}") from None
        finally:
            root.removeFilter(advice)
            float_path.unlink(missing_ok=True)
        quantized = onnx.load(str(path))
        if not any(n.op_type == "DequantizeLinear" for n in quantized.graph.node):
            path.unlink(missing_ok=True)
            raise RunError("export: onnxruntime quantized no operator of this model to int8; export it as onnx")
        meta = {p.key: p for p in quantized.metadata_props}
        if META_KEY in meta:
            meta[META_KEY].value = embedded(self, desc, output)
        else:
            quantized.metadata_props.add(key=META_KEY, value=embedded(self, desc, output))
        onnx.save(quantized, str(path))


def weight_axes(path: Path) -> dict[str, int]:
    """Each quantized weight's number of scales (one per output channel when per-channel), by its name."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: i for i in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in inits and node.input[1] in inits:
            out[node.input[0]] = int(numpy_helper.to_array(inits[node.input[1]]).size)
    return out


ONNX_INT8 = OnnxInt8Format()


# ----------------------------------------------------------------------------- ExecuTorch

MAX_BATCH = 4096  # the largest batch a .pte takes at once (XNNPACK plans its memory for a bounded size)
ET_HINT = "pip install 'traindesk[executorch]' (executorch, torchao)"


def _executorch() -> Any:
    try:
        from executorch import runtime
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
    except Exception as exc:  # not installed, or built against another torch
        raise UserError(f"export: ExecuTorch does not load beside torch here ({first_line(exc)}); {ET_HINT}") from None
    return runtime, XnnpackPartitioner, to_edge_transform_and_lower


def _method(path: Path) -> Any:
    runtime = _executorch()[0]
    try:
        return runtime.Runtime.get().load_program(str(path)).load_method("forward")
    except Exception as exc:
        raise ModelFileError(f"model: {path} is not a loadable ExecuTorch program: {first_line(exc)}") from None


def _et_runner(method: Any) -> Any:
    import torch

    try:  # the rows its memory was planned for: XNNPACK may plan fewer than the export's bound (a conv's)
        step = max(1, int(method.metadata.input_tensor_meta(0).sizes()[0]))
    except Exception:
        step = MAX_BATCH

    def run(x: torch.Tensor) -> torch.Tensor:
        parts = [method.execute([x[lo : lo + step].contiguous()])[0] for lo in range(0, len(x), step)]
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    return run


class ExecuTorchFormat(ModelFormat):
    """``.pte``: an ExecuTorch program lowered to XNNPACK, the standardisation (and a table's fills) inside,
    verified with ExecuTorch's own runtime; ``executorch-int8`` quantizes its layers by PT2E (torchao's flow):
    int8 weights per output channel; an image model's activations int8 from ranges measured on the training
    split, a table model's quantized per batch as it runs (XNNPACK's dynamic int8: static ranges would be
    shared with the table's bucket numbers that the layers' inputs are cut from)."""

    name = "executorch"
    suffix = ".pte"
    label = "ExecuTorch for XNNPACK (.pte)"
    graph = True
    quantize = False

    def read_meta(self, path: Path) -> dict[str, Any]:
        return meta_or_sidecar(None, path)

    def load(self, path: Path, threads: int = 0, meta: dict[str, Any] | None = None) -> Predictor:
        from core.services.formats.module import torch_runner

        meta = meta or self.read_meta(path)
        run = _et_runner(_method(path))
        schema = tabular_schema(meta)
        if schema is not None:
            return Predictor(path, meta, raw_rows_runner(schema, run), meta["export"]["output"])
        return Predictor(path, meta, torch_runner(run), meta["export"]["output"])

    def write(self, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
        import torch

        from core.services.formats.module import standardized

        _, partitioner, lower = _executorch()
        graph = standardized(model, desc, output, "export")
        schema = tabular_schema(desc)
        if schema is not None:  # raw rows in, as the .pt2 takes them
            graph = with_table_rows(graph, schema)
            raw = torch.from_numpy(raw_rows_from_encoded(schema, raw.numpy()))
        dims = ({0: torch.export.Dim("batch", min=1, max=MAX_BATCH)},)
        try:
            with quiet_exporters():
                program = torch.export.export(graph, (example_batch(raw),), dynamic_shapes=dims, strict=False)
                if self.quantize:  # a table's layers quantize their inputs per batch, an image model's by calibration
                    quantized = self._quantized(program.module(), raw, dynamic=schema is not None)
                    program = torch.export.export(quantized, (example_batch(raw),), dynamic_shapes=dims, strict=False)
                written = lower(program, partitioner=[partitioner()]).to_executorch()
        except UserError:
            raise
        except Exception as exc:
            raise RunError(f"export: ExecuTorch cannot lower this model: {first_line(exc)}") from None
        path.write_bytes(written.buffer)

    @staticmethod
    def _quantized(module: Any, calibration: torch.Tensor, dynamic: bool) -> Any:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torch import nn
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        class LayersOnly(XNNPACKQuantizer):
            """The layers' own inputs, weights and outputs: its annotations are not propagated through the
            slices, index lookups and concatenations around them (a table's bucket numbers pass there)."""

            def annotate(self, model: Any) -> Any:
                return self._annotate_for_quantization_config(model)

        config = get_symmetric_quantization_config(is_per_channel=PER_CHANNEL, is_dynamic=dynamic)
        if dynamic:  # a table's model: its Linear layers alone, as onnx-int8 (QUANTIZED_OPS) does
            quantizer = LayersOnly()
            for layer in (nn.Linear, nn.Conv1d, nn.Conv2d):
                quantizer.set_module_type(layer, config)
        else:  # an image model: every operator XNNPACK quantizes (a graph's convolutions lose their module types)
            quantizer = XNNPACKQuantizer().set_global(config)
        prepared = prepare_pt2e(module, quantizer)
        for lo in range(0, len(calibration), CALIBRATION_BATCH):  # the activations' ranges (dynamic: none kept)
            prepared(calibration[lo : lo + CALIBRATION_BATCH])
        return convert_pt2e(prepared)

    def reload(
        self, path: Path, desc: dict[str, Any], output: str, raw: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray | None, str]:
        run = _et_runner(_method(path))
        schema = tabular_schema(desc or {})
        if schema is not None:
            import torch

            raw = torch.from_numpy(raw_rows_from_encoded(schema, raw.numpy(), beyond_fences=True))
        return run(raw).numpy(), run(raw[:1]).numpy(), "executorch.runtime (XNNPACK)"


class ExecuTorchInt8Format(ExecuTorchFormat):
    name = "executorch-int8"
    stem = "model-int8"
    label = "ExecuTorch int8 for XNNPACK (.pte, quantized)"
    quantize = True
    lossy = True
    calibrates = True


EXECUTORCH = ExecuTorchFormat()
EXECUTORCH_INT8 = ExecuTorchInt8Format()
