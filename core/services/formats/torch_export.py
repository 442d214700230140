"""``.pt2``: a ``torch.export`` program with the standardisation inside; the description is an extra file.

A table's program takes raw rows (``core.services.formats.table_graph``): the schema's fill, fences and
missing indicators are inside it, as they are in the ONNX graph.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ModelFileError, RunError
from core.services.formats.base import ModelFormat, example_batch, first_line, quiet_exporters
from core.services.formats.description import PT2_EXTRA, embedded, meta_or_sidecar, parse_meta
from core.services.formats.module import standardized, torch_runner
from core.services.formats.predictor import Predictor
from core.services.formats.table_graph import RAW_ROWS, raw_rows_from_encoded, raw_rows_runner, with_table_rows
from core.services.formats.tabular import tabular_schema

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn


class TorchExportFormat(ModelFormat):
    name = "torch-export"
    suffix = ".pt2"
    label = "torch.export program (.pt2)"
    graph = True

    def read_meta(self, path: Path) -> dict[str, Any]:
        try:
            with zipfile.ZipFile(path) as zf:
                name = next((n for n in zf.namelist() if n.endswith("/extra/" + PT2_EXTRA)), None)
                text = zf.read(name).decode("utf-8") if name is not None else None
        except zipfile.BadZipFile:
            raise ModelFileError(f"model: {path} is not a torch.export program (.pt2 archive)") from None
        return meta_or_sidecar(text, path)

    def load(self, path: Path, threads: int = 0, meta: dict[str, Any] | None = None) -> Predictor:
        import torch

        extra = {PT2_EXTRA: ""}
        try:
            program = torch.export.load(str(path), extra_files=extra)
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0]
            raise ModelFileError(f"model: {path} is not a loadable torch.export program: {first[:200]}") from None
        meta = parse_meta(extra[PT2_EXTRA], path) if extra[PT2_EXTRA] else self.read_meta(path)
        schema = tabular_schema(meta)
        if schema is not None and meta["export"].get("layout") == RAW_ROWS:  # fed encoded rows, turned back raw
            return Predictor(path, meta, raw_rows_runner(schema, program.module()), meta["export"]["output"])
        return Predictor(path, meta, torch_runner(program.module()), meta["export"]["output"])

    def write(self, model: nn.Module, desc: dict[str, Any], path: Path, output: str, raw: torch.Tensor) -> None:
        import torch

        graph = standardized(model, desc, output, "export")
        schema = tabular_schema(desc)
        if schema is not None:  # a table's graph takes raw rows: the schema's fill, fences and indicators go in front
            graph = with_table_rows(graph, schema)
            raw = torch.from_numpy(raw_rows_from_encoded(schema, raw.numpy(), beyond_fences=True))
        batch = torch.export.Dim("batch")
        try:
            with quiet_exporters():
                program = torch.export.export(graph, (example_batch(raw),), dynamic_shapes=({0: batch},), strict=False)
        except Exception as exc:
            raise RunError(f"export: torch.export cannot trace this model: {first_line(exc)}") from None
        torch.export.save(program, str(path), extra_files={PT2_EXTRA: embedded(self, desc, output)})

    def reload(
        self, path: Path, desc: dict[str, Any], output: str, raw: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray | None, str]:
        """A table's graph is fed the raw rows that encode to ``raw``, values at the fences moved past them."""
        import torch

        module = torch.export.load(str(path)).module()
        schema = tabular_schema(desc or {})
        if schema is not None:
            raw = torch.from_numpy(raw_rows_from_encoded(schema, raw.numpy(), beyond_fences=True))
        with torch.no_grad():
            return module(raw).numpy(), module(raw[:1]).numpy(), "torch.export.load"


TORCH_EXPORT = TorchExportFormat()
