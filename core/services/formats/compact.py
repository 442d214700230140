"""Small exports: ``onnx-int8``, an ONNX graph with int8 weights and activations, calibrated on the run's data.

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

from core.errors import RunError
from core.services.formats.base import first_line
from core.services.formats.description import META_KEY, embedded
from core.services.formats.onnx import ONNX, OnnxFormat

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
