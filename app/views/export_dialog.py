"""Export dialog: choose a format and a file; the export runs and verifies itself off the GUI thread.

``ExportDialog(run_dir, parent=None)``; ``exported`` (an ``ExportResult``) or
``failed`` (one line) is emitted when the export ends. ``combo_checkpoint``
chooses the run's best evaluation (the default once checkpoints/best.pt
exists) or its last checkpoint. The verification figure
(max absolute difference between the reloaded file and the trained model) is
shown in the dialog.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.shell.tasks import BackgroundCalls
from app.views.checkpoint_choice import CheckpointCombo
from core.services.formats import EXPORT_FORMATS, ModelFormat
from core.services.formats.onnx import OnnxFormat
from core.services.formats.onnx import missing_extra as onnx_extra_missing
from core.services.runs.files import RunDir


def error_text(exc: BaseException) -> str:
    """One line for the user: input errors as they are, anything else with its type."""
    from core.errors import INPUT_ERRORS

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if isinstance(exc, INPUT_ERRORS) else f"{type(exc).__name__}: {text}"


class ExportDialog(QDialog):
    exported = Signal(object)  # core.services.export.ExportResult
    failed = Signal(str)

    def __init__(self, run_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.run_dir = Path(run_dir)
        self.result: Any = None
        self.setObjectName("dialog_export")
        self.setWindowTitle(f"Export model: {self.run_dir.name}")
        self._calls = BackgroundCalls(self)

        self.combo_format = QComboBox(objectName="combo_export_format")
        missing = onnx_extra_missing()
        for name, fmt in EXPORT_FORMATS.items():
            self.combo_format.addItem(fmt.label, name)
            if isinstance(fmt, OnnxFormat) and missing:
                index = self.combo_format.count() - 1
                items = cast(QStandardItemModel, self.combo_format.model())  # a QComboBox's own model
                items.item(index).setEnabled(False)
                self.combo_format.setItemData(
                    index,
                    f"needs the optional extra 'onnx' ({missing} is missing): pip install 'traindesk[onnx]'",
                    Qt.ItemDataRole.ToolTipRole,
                )
        self.combo_checkpoint = CheckpointCombo()
        self.combo_checkpoint.set_run(self.run_dir)
        self.combo_output = QComboBox(objectName="combo_export_output")
        self.combo_output.addItem("class probabilities", "probabilities")
        self.combo_output.addItem("logits", "logits")
        self.combo_output.setToolTip("what the torch.export and ONNX graphs return (they take raw features)")
        self.check_accept_loss = QCheckBox("Write it whatever accuracy it loses", objectName="check_export_accept_loss")
        self.check_accept_loss.setToolTip(
            "An int8 file that loses more than 1 point of accuracy (or R²) on the validation rows is not written "
            "unless this is on; what it costs is measured and recorded either way"
        )
        self.edit_path = QLineEdit(objectName="edit_export_path")
        self.button_browse = QPushButton("Browse…", objectName="button_export_browse")
        self.label_result = QLabel(objectName="label_export_result")
        self.label_result.setWordWrap(True)
        self.label_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.button_export = self.buttons.addButton("Export", QDialogButtonBox.ButtonRole.ApplyRole)
        self.button_export.setObjectName("button_export")
        self.button_export.setDefault(True)
        self._layout()

        self.combo_format.currentIndexChanged.connect(self._on_format_changed)
        self.button_browse.clicked.connect(self._on_browse)
        self.button_export.clicked.connect(self.start_export)
        self.buttons.rejected.connect(self.reject)
        self._on_format_changed()

    def _layout(self) -> None:
        form = QFormLayout()
        form.addRow("Weights", self.combo_checkpoint)
        form.addRow("Format", self.combo_format)
        form.addRow("Graph output", self.combo_output)
        form.addRow("", self.check_accept_loss)
        path_row = QHBoxLayout()
        path_row.addWidget(self.edit_path, 1)
        path_row.addWidget(self.button_browse)
        form.addRow("File", path_row)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.label_result)
        layout.addWidget(self.buttons)
        self.resize(560, 200)

    # -- state ------------------------------------------------------------------------
    @property
    def format(self) -> str:
        return str(self.combo_format.currentData())

    @property
    def model_format(self) -> ModelFormat:
        return EXPORT_FORMATS[self.format]

    def set_format(self, fmt: str) -> None:
        self.combo_format.setCurrentIndex(self.combo_format.findData(fmt))

    def set_path(self, path: Path) -> None:
        self.edit_path.setText(str(path))

    @property
    def busy(self) -> bool:
        return self._calls.busy

    def _on_format_changed(self) -> None:
        fmt = self.model_format
        if not self.busy:  # the last result was another format's file: it says nothing of this one
            self.result = None
            self._show_result("", "")
        self.combo_output.setEnabled(fmt.graph)
        self.check_accept_loss.setEnabled(fmt.lossy)
        text = self.edit_path.text().strip()
        current = Path(text) if text else RunDir(self.run_dir).exports / "model"
        if current.suffix in {f.suffix for f in EXPORT_FORMATS.values()}:
            current = current.with_suffix("")
        if current.name in {f.stem for f in EXPORT_FORMATS.values()}:  # a default name follows the format
            current = current.with_name(fmt.stem)
        self.edit_path.setText(str(current.with_suffix(fmt.suffix)))

    def _on_browse(self) -> None:
        suffix = self.model_format.suffix
        path, _ = QFileDialog.getSaveFileName(self, "Export to", self.edit_path.text(), f"{self.format} (*{suffix})")
        if path:
            self.set_path(Path(path) if path.endswith(suffix) else Path(path + suffix))

    # -- export -------------------------------------------------------------------------
    def start_export(self) -> None:
        """Export and verify on a background thread; the result arrives in ``_on_done``/``_on_error``."""
        if self.busy:
            return
        from core.services.export import MAX_LOSS, export_run  # the export stack loads only when used

        run_dir, fmt, output = self.run_dir, self.format, str(self.combo_output.currentData())
        which = self.combo_checkpoint.which
        accept = self.check_accept_loss.isEnabled() and self.check_accept_loss.isChecked()
        out = Path(self.edit_path.text().strip()) if self.edit_path.text().strip() else None
        self._set_busy(True)
        self._show_result("Exporting, then reloading the file to verify it…", "")
        self._calls.call(
            lambda: export_run(run_dir, fmt, out, output, which, MAX_LOSS, accept),
            self._on_done,
            self._on_error,
            name="export",
        )

    def _on_done(self, result: Any) -> None:
        from core.services.export import cost_line

        self._set_busy(False)
        self.result = result
        self._show_result(
            f"✓ Verified: {result.path} ({self.combo_checkpoint.currentText()})\n"
            f"Reloaded with {result.verifier}: max abs difference "
            f"{result.max_abs_diff:.3g} on {result.checked_on}; {result.agree}/{result.rows_checked} "
            f"predictions agree.\n"
            + (f"Cost: {cost_line(result.cost)}.\n" if result.cost else "")
            + f"Output: {result.output}. Wrote: "
            + ", ".join(p.name for p in result.files),
            "ok",
        )
        self.exported.emit(result)

    def _on_error(self, exc: BaseException) -> None:
        self._set_busy(False)
        message = error_text(exc)
        self._show_result(f"✗ Export failed: {message}", "error")
        self.failed.emit(message)

    def _show_result(self, text: str, level: str) -> None:
        """The result line, the dialog grown to hold it: a fixed height would squash the fields above it."""
        self.label_result.setProperty("level", level)
        self.label_result.setText(text)
        layout = self.layout()
        if layout is None:  # not laid out yet (the first format, set in __init__)
            return
        layout.activate()
        need = layout.totalHeightForWidth(self.width()) if layout.hasHeightForWidth() else -1
        need = max(need, layout.totalMinimumSize().height())
        if need > self.height():
            self.resize(self.width(), need)

    def _set_busy(self, busy: bool) -> None:
        for w in (self.combo_format, self.edit_path, self.button_browse, self.button_export):
            w.setEnabled(not busy)
        self.combo_checkpoint.setEnabled(not busy and self.combo_checkpoint.count() > 1)
        self.combo_output.setEnabled(not busy and self.model_format.graph)
        self.buttons.button(QDialogButtonBox.StandardButton.Close).setEnabled(not busy)

    def reject(self) -> None:
        # an export cannot be interrupted half-way (it would leave a staging folder): let it end
        if self.busy:
            self.label_result.setText("Export in progress: the dialog closes once it has finished.")
            return
        super().reject()

    def wait(self, timeout_s: float = 60.0) -> bool:
        """Block until a running export has returned (shutdown and tests)."""
        return self._calls.wait_all(timeout_s) and self.combo_checkpoint.wait(timeout_s)
