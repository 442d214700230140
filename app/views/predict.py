"""Predict view: choose an exported model and an input file or folder, see the predictions, save them.

``PredictView()``; ``set_model(path)``, ``set_input(path)``, ``run()`` and
``save(path)`` do what the buttons do; ``set_images(files)`` takes image files
(``button_predict_pick_images``, shown for an image model, or files and folders
dropped on the view), and a chosen row of an image input shows its picture and
top classes. Prediction runs on a background thread
(``core.services.predict.predict``, with ``--workers``-style processes when asked),
its progress, rate and time left shown as the pieces come back (``progress_predict``),
and Cancel (``button_predict_cancel``) ends it at its next piece;
``predicted`` (a ``Predictions``), ``saved`` (the path) or ``failed`` (one line)
follow. The table reads the result arrays lazily, so 200,000 rows cost nothing
until they are scrolled to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.shell.tasks import BackgroundCalls
from app.views.class_tables import ConfusionTable, PerClassTable
from app.views.export_dialog import error_text
from app.views.image_answer import IMAGE_FILTER, FileDrops, ImageAnswer, image_files, is_image
from core.services.formats import model_file_filter
from core.services.inputs import INPUT_FILTERS

MODEL_FILTER = model_file_filter("Exported models")  # the formats registry's files
INPUT_FILTER = INPUT_FILTERS  # the input registry's files (core.readers.inputs); folders have their own button
# A labelled input (a "label"/"target" column, an NPZ "y", class folders) is scored as a test set.

Index = QModelIndex | QPersistentModelIndex
_ROOT = QModelIndex()  # the invalid index: the parent of a table's rows


class PredictionsModel(QAbstractTableModel):
    """id, predicted class, then one probability column per class, straight from the result arrays."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: Any = None
        self._best: list[int] = []

    def set_result(self, result: Any) -> None:
        self.beginResetModel()
        self.result = result
        self._best = result.probs.argmax(axis=1).tolist() if result is not None else []
        self.endResetModel()

    def rowCount(self, parent: Index = _ROOT) -> int:
        return 0 if self.result is None or parent.isValid() else len(self.result.ids)

    def columnCount(self, parent: Index = _ROOT) -> int:
        return 0 if self.result is None or parent.isValid() else 2 + len(self.result.classes)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if self.result is None or not index.isValid():
            return None
        r, c = index.row(), index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if c == 0:
                return self.result.ids[r]
            if c == 1:
                return self.result.classes[self._best[r]]
            return f"{float(self.result.probs[r, c - 2]):.4f}"
        if role == Qt.ItemDataRole.TextAlignmentRole and c >= 2:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role != Qt.ItemDataRole.DisplayRole or self.result is None:
            return None
        if orientation == Qt.Orientation.Vertical:
            return section + 1
        return ["id", "predicted"][section] if section < 2 else f"p({self.result.classes[section - 2]})"


class PredictProgress(QWidget):
    """A running prediction's bar and Cancel: follows its ``PredictWatch`` every 200 ms, writing the count, the
    rate and the time left into ``status``; Cancel asks the watch to end the prediction at its next piece."""

    def __init__(self, status: QLabel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.status = status
        self.watch: Any = None  # core.services.predict.PredictWatch of the prediction followed
        self.bar = QProgressBar(objectName="progress_predict")
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.button_cancel = QPushButton("Cancel", objectName="button_predict_cancel")
        self.button_cancel.setToolTip("Stop predicting (the rows so far are not kept)")
        self.button_cancel.clicked.connect(self.cancel)
        self.timer = QTimer(self)
        self.timer.setInterval(200)
        self.timer.timeout.connect(self._tick)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.button_cancel)
        row.addWidget(self.bar)
        self.hide()

    def follow(self, watch: Any) -> None:
        self.watch = watch
        self.bar.setValue(0)
        self.button_cancel.setEnabled(True)
        self.show()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()
        self.hide()

    def cancel(self) -> None:
        if self.watch is not None and self.timer.isActive():
            self.watch.cancel()
            self.button_cancel.setEnabled(False)
            self.status.setText(f"Cancelling… ({self.watch.describe()})")

    def _tick(self) -> None:
        watch = self.watch
        if watch is None or watch.cancelled:
            return
        if watch.total:
            self.bar.setValue(int(1000 * min(1.0, watch.done / watch.total)))
        if watch.started is not None:
            self.status.setText(f"Predicting… {watch.describe()}")


class PredictView(QWidget):
    predicted = Signal(object)  # core.services.predict.Predictions
    saved = Signal(str)
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("predict_view")
        self.result: Any = None
        self._calls = BackgroundCalls(self)

        self.edit_model = QLineEdit(objectName="edit_predict_model")
        self.edit_model.setPlaceholderText("a run folder, or .safetensors, .pt2 or .onnx from Export")
        self._offered = ""  # the model the window offered (the run on screen), not one the user chose
        self.button_model = QPushButton("Browse…", objectName="button_predict_model_browse")
        self.edit_input = QLineEdit(objectName="edit_predict_input")
        self.edit_input.setPlaceholderText("CSV or NPZ with the training features, or an image folder")
        self.button_input_file = QPushButton("File…", objectName="button_predict_input_file")
        self.button_input_folder = QPushButton("Folder…", objectName="button_predict_input_folder")
        self.button_pick_images = QPushButton("Images…", objectName="button_predict_pick_images")
        self.button_pick_images.setToolTip("Image files to predict (or drop files or a folder on this tab)")
        self.button_pick_images.hide()  # offered once the chosen model says it takes images
        self.image_files: list[Path] = []  # the chosen image files, when they are the input
        self.spin_workers = QSpinBox(objectName="spin_predict_workers")
        from core.services.predict.planning import worker_limit

        self.spin_workers.setRange(1, worker_limit())
        self.spin_workers.setValue(self.spin_workers.maximum())
        self.spin_workers.setToolTip(
            "processes to split the input across, one compute thread each (the result is the same)"
        )
        self.button_predict = QPushButton("Predict", objectName="button_predict")
        self.button_save = QPushButton("Save CSV…", objectName="button_predict_save")
        self.button_save.setEnabled(False)
        self.label_status = QLabel(objectName="label_predict_status")
        self.progress_row = PredictProgress(self.label_status)
        self.progress, self.button_cancel = self.progress_row.bar, self.progress_row.button_cancel
        self.label_status.setWordWrap(True)
        # what the model takes, once it is chosen: a CSV's columns are matched to these names
        self.label_columns = QLabel(objectName="label_predict_columns")
        self.label_columns.setWordWrap(True)
        self.label_columns.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.check_by_position = QCheckBox(
            "Use the input's columns by position (in the training order)", objectName="check_predict_by_position"
        )
        self.check_by_position.setToolTip(
            "for a CSV with as many feature columns as the model takes, "
            "named differently (traindesk predict --by-position)"
        )
        self.check_by_position.hide()  # offered when a CSV's names differ but its column count fits
        self._meta_calls = BackgroundCalls(self)
        self.model_predictions = PredictionsModel(self)
        self.table = QTableView(objectName="table_predictions")
        self.table.setModel(self.model_predictions)
        self.label_test = QLabel(objectName="label_test_metrics")
        self.label_test.setWordWrap(True)
        self.table_test_confusion = ConfusionTable(objectName="table_test_confusion")
        self.table_test_per_class = PerClassTable(objectName="table_test_per_class")
        self.test_panel = QWidget(objectName="test_panel")
        self.image_answer = ImageAnswer("predict")
        self.image_answer.hide()
        self.label_predict_image = self.image_answer.label_image
        self.table_predict_top_classes = self.image_answer.table_top
        self._pictured: Path | list[Path] | None = None  # an image input: its files, folder or file
        self.evaluation: dict[str, Any] | None = None
        self._layout()

        self.button_model.clicked.connect(self._on_browse_model)
        self.button_input_file.clicked.connect(lambda: self._on_browse_input(folder=False))
        self.button_input_folder.clicked.connect(lambda: self._on_browse_input(folder=True))
        self.button_pick_images.clicked.connect(self._on_pick_images)
        self.drops = FileDrops(self)
        self.drops.watch(self, self.edit_input, self.table.viewport())
        self.drops.dropped.connect(self.take_dropped)
        self.edit_input.textEdited.connect(lambda _t: self.image_files.clear())  # typed: a path again
        self.table.selectionModel().currentRowChanged.connect(lambda current, _prev: self._show_row(current.row()))
        self.button_predict.clicked.connect(self.run)
        self.button_save.clicked.connect(self._on_save_clicked)
        self.edit_model.editingFinished.connect(self._describe_model)
        self.edit_model.textChanged.connect(lambda _t: self._on_model_edited())
        self.edit_input.textChanged.connect(lambda _t: self.check_by_position.hide())

    def _layout(self) -> None:
        form = QFormLayout()
        row = QHBoxLayout()
        row.addWidget(self.edit_model, 1)
        row.addWidget(self.button_model)
        form.addRow("Model", row)
        form.addRow("", self.label_columns)
        row = QHBoxLayout()
        row.addWidget(self.edit_input, 1)
        row.addWidget(self.button_input_file)
        row.addWidget(self.button_input_folder)
        row.addWidget(self.button_pick_images)
        form.addRow("Input", row)
        form.addRow("", self.check_by_position)
        form.addRow("Workers", self.spin_workers)
        actions = QHBoxLayout()
        actions.addWidget(self.button_predict)
        actions.addWidget(self.button_save)
        actions.addWidget(self.progress_row)
        actions.addWidget(self.label_status, 1)
        test = QVBoxLayout(self.test_panel)
        test.setContentsMargins(0, 0, 0, 0)
        test.addWidget(self.label_test)
        tables = QSplitter(Qt.Orientation.Horizontal)
        tables.addWidget(self.table_test_confusion)
        tables.addWidget(self.table_test_per_class)
        test.addWidget(tables, 1)
        self.test_panel.hide()
        # The picture beside the predictions alone: the test set's two tables below keep the tab's whole width
        # (beside everything, a 900 px window left each of them a column or two).
        beside = QSplitter(Qt.Orientation.Horizontal, objectName="splitter_predict_image")
        beside.addWidget(self.table)
        beside.addWidget(self.image_answer)
        beside.setStretchFactor(0, 3)
        beside.setStretchFactor(1, 2)
        beside.setChildrenCollapsible(False)
        body = QSplitter(Qt.Orientation.Vertical, objectName="splitter_predict_body")
        body.addWidget(beside)
        body.addWidget(self.test_panel)
        body.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(actions)
        layout.addWidget(body, 1)

    # -- inputs -------------------------------------------------------------------------------
    def set_model(self, path: Path | str) -> None:
        self.edit_model.setText(str(path))
        self._describe_model()

    def _on_model_edited(self) -> None:
        """Another model: the answer on screen was the previous model's."""
        if self.result is not None and not self.busy:
            self._clear_result()
            self.label_status.setText("")

    def offer_model(self, path: Path | str) -> None:
        """The run on screen (its best checkpoint, else its last), unless the user chose another model."""
        text = self.edit_model.text().strip()
        if self.busy or (text and text != self._offered) or text == str(path):
            return
        self._offered = str(path)
        self.set_model(path)

    def _describe_model(self) -> None:
        """Say what the chosen model takes (its feature columns), read off the GUI thread."""
        model = self.edit_model.text().strip()
        if not model:
            self.label_columns.setText("")
            return

        def read() -> dict[str, Any]:
            from core.services.predict import read_model_meta, resolve_model_path

            return read_model_meta(resolve_model_path(Path(model)))

        self._meta_calls.call(
            read,
            lambda meta: self._on_model_described(model, meta),
            lambda exc: self._on_model_described(model, None),
            name="predict-model-meta",
        )

    def _on_model_described(self, model: str, meta: dict[str, Any] | None) -> None:
        if model != self.edit_model.text().strip():
            return  # an older choice's answer
        self.label_columns.setText(expected_columns_text(meta) if meta else "")
        from core.services.predict import model_image_shape

        self.button_pick_images.setVisible(bool(meta) and model_image_shape(meta or {}) is not None)
        self.label_columns.setToolTip(", ".join(expected_columns(meta or {})))

    def set_input(self, path: Path | str) -> None:
        self.image_files = []
        self.edit_input.setText(str(path))

    def set_images(self, files: list[Path]) -> None:
        """Image files as the input (predicted together; each row then shows its picture)."""
        self.image_files = list(files)
        names = ", ".join(p.name for p in files[:3]) + (f" … ({len(files)} images)" if len(files) > 3 else "")
        self.edit_input.setText(names)
        self.edit_input.setToolTip("\n".join(str(p) for p in files[:20]))

    def _on_pick_images(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Images to predict", "", IMAGE_FILTER)
        if files:
            self.set_images([Path(p) for p in files])
            self._run_if_ready()

    def take_dropped(self, paths: list[Path]) -> None:
        """Files or folders dropped on the tab: image files (several at once), a folder, or one input file;
        predicted at once when a model is chosen."""
        if len(paths) == 1 and not is_image(paths[0]):
            self.set_input(paths[0])  # a folder (predicted as `traindesk predict` does) or a table, an NPZ
        else:
            images = image_files(paths)
            if not images:
                self._fail(f"no image files among the {len(paths)} dropped")
                return
            self.set_images(images)
        self._run_if_ready()

    def _run_if_ready(self) -> None:
        if self.edit_model.text().strip():
            self.run()

    def _on_browse_model(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Exported model", self.edit_model.text(), MODEL_FILTER)
        if path:
            self.set_model(path)

    def _on_browse_input(self, folder: bool) -> None:
        if folder:
            path = QFileDialog.getExistingDirectory(self, "Image folder", self.edit_input.text())
        else:
            path, _ = QFileDialog.getOpenFileName(self, "Input features", self.edit_input.text(), INPUT_FILTER)
        if path:
            self.set_input(path)

    # -- work ---------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._calls.busy

    def run(self) -> None:
        """Predict on a background thread (a labelled input is also scored as a test set)."""
        if self.busy:
            return
        model, inp = self.edit_model.text().strip(), self.edit_input.text().strip()
        if not model or not inp:
            self._fail("choose an exported model and an input file or folder first")
            return
        from core.services.predict import PredictWatch, predict, predict_images

        self._clear_result()  # the previous input's rows would read as this one's answer meanwhile
        files = list(self.image_files)
        self._pictured = files or (Path(inp) if Path(inp).is_dir() or is_image(Path(inp)) else None)
        watch = PredictWatch()
        workers = self.spin_workers.value()
        by_position = not self.check_by_position.isHidden() and self.check_by_position.isChecked()
        self._calls.call(
            (lambda: predict_images(Path(model), files, watch=watch))
            if files
            else (lambda: predict(Path(model), Path(inp), workers, by_position=by_position, watch=watch)),
            self._on_done,
            self._on_error,
            name="predict",
        )
        self._set_busy(True)
        self.progress_row.follow(watch)
        self.label_status.setText("Predicting…")

    def cancel(self) -> None:
        """End the prediction running at its next piece (its processes with it)."""
        self.progress_row.cancel()

    def _on_done(self, result: Any) -> None:
        self._set_busy(False)
        self.result = result
        self.model_predictions.set_result(result)
        self.table.resizeColumnsToContents()
        n = len(result.ids)
        unit = "images" if self._pictured is not None else "rows"
        rate = n / max(result.seconds, 1e-9)
        self.label_status.setText(
            f"{n:,} {unit if n != 1 else unit[:-1]} predicted with {result.model_path.name} in "
            f"{result.seconds:.2f} s ({rate:,.0f} {unit}/s)"
        )
        self.button_save.setEnabled(True)
        self.show_test_evaluation(result.evaluation() if hasattr(result, "evaluation") else None)
        self._show_images()
        self.predicted.emit(result)

    def show_test_evaluation(self, ev: dict[str, Any] | None) -> None:
        """Accuracy, per-class metrics and the confusion matrix of a labelled input; hidden otherwise."""
        self.evaluation = ev
        self.test_panel.setVisible(ev is not None)
        if ev is None:
            return
        if "per_class" not in ev:  # a regression model scored on a table with its target column
            self.label_test.setText(
                f"Test set: RMSE {ev['rmse']:.4g} · MAE {ev['mae']:.4g} · R² {ev['r2']:.3f} "
                f"on {ev['n']:,} labelled samples"
            )
            self.table_test_confusion.show_matrix([], [])
            self.table_test_per_class.show_classes([])
            return
        self.label_test.setText(
            f"Test set: accuracy {ev['accuracy']:.2%} on {ev['n']:,} labelled samples · "
            f"macro F1 {ev['macro']['f1']:.3f}"
        )
        self.table_test_confusion.show_matrix([c["class"] for c in ev["per_class"]], ev["confusion"])
        self.table_test_per_class.show_classes(ev["per_class"])

    def _picture_of(self, row: int) -> Path | None:
        """The image file of a result row (None: the input is no image input)."""
        where, result = self._pictured, self.result
        if result is None or where is None or not 0 <= row < len(result.ids):
            return None
        if isinstance(where, list):
            return where[row] if len(where) == len(result.ids) else None
        return where / result.ids[row] if where.is_dir() else where  # a folder's ids are paths under it

    def _show_images(self) -> None:
        shown = self._picture_of(0) is not None
        self.image_answer.setVisible(shown)
        if shown:
            self.table.selectRow(0)
            self._show_row(0)

    def _show_row(self, row: int) -> None:
        """The picture of a result row and its top classes (an image input)."""
        path = self._picture_of(row)
        if path is not None and self.result is not None:
            self.image_answer.show_answer(path, dict(zip(self.result.classes, self.result.probs[row].tolist())))

    def _clear_result(self) -> None:
        self.image_answer.hide()
        self.result = None
        self.model_predictions.set_result(None)
        self.show_test_evaluation(None)
        self.button_save.setEnabled(False)

    def _on_error(self, exc: BaseException) -> None:
        self._set_busy(False)
        self._clear_result()  # an old result next to a new error would read as the answer to this input
        from core.services.predict import ColumnNamesDiffer, PredictionCancelled

        if isinstance(exc, PredictionCancelled):  # asked for: a status, not a failure
            self.label_status.setText(str(exc).removeprefix("predict: ").capitalize())
            return
        if isinstance(exc, ColumnNamesDiffer):  # usable as they are, in order: offer it instead of the CLI's flag
            self.check_by_position.setChecked(False)
            self.check_by_position.show()
            self._fail(
                f"the input's {len(exc.found)} columns are named {_names(exc.found)}, the model's "
                f'{_names(exc.expected)}: tick "{self.check_by_position.text()}" and Predict again '
                "if they are the same columns in the same order"
            )
            return
        self._fail(error_text(exc))

    def _fail(self, message: str) -> None:
        self._set_busy(False)  # whatever failed, the tab is usable again
        self.label_status.setText(f"✗ {message}")
        self.failed.emit(message)

    def _set_busy(self, busy: bool) -> None:
        for w in (
            self.button_predict,
            self.edit_model,
            self.edit_input,
            self.button_model,
            self.button_input_file,
            self.button_input_folder,
            self.button_pick_images,
            self.spin_workers,
        ):
            w.setEnabled(not busy)
        self.button_save.setEnabled(not busy and self.result is not None)
        if not busy:
            self.progress_row.stop()

    def _on_save_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save predictions", "predictions.csv", "CSV (*.csv)")
        if path:
            self.save(Path(path))

    def save(self, path: Path) -> None:
        """Write the predictions CSV (the same text as ``traindesk predict --out``), atomically, off-thread."""
        if self.result is None or self.busy:
            return
        result = self.result
        self._set_busy(True)
        self._calls.call(
            lambda: result.save(Path(path)),
            lambda _r: self._on_saved(Path(path)),
            lambda exc: self._fail(error_text(exc)),
            name="save-predictions",
        )

    def _on_saved(self, path: Path) -> None:
        self._set_busy(False)
        self.label_status.setText(f"Saved {path}")
        self.saved.emit(str(path))

    def wait(self, timeout_s: float = 60.0) -> bool:
        """Block until background work has returned (shutdown and tests)."""
        return self._calls.wait_all(timeout_s) and self._meta_calls.wait_all(timeout_s)


def _names(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" … {names[-1]}" if len(names) > limit else "")


def expected_columns(meta: dict[str, Any]) -> list[str]:
    """The columns a model takes by name: a table model's raw columns (its schema's, the ignored ones left out;
    never the encoded features such as ``*_missing`` indicators), else its input's feature names."""
    schema = meta.get("schema") or {}
    if schema.get("columns"):
        return [str(c["name"]) for c in schema["columns"] if c.get("kind") != "ignore"]
    return [str(f) for f in (meta.get("input") or {}).get("features") or []]


def expected_columns_text(meta: dict[str, Any]) -> str:
    """What a model takes, in a line: its columns (a CSV's names) or its input's shape."""
    features = expected_columns(meta)
    shape = "×".join(str(s) for s in (meta.get("input") or {}).get("shape") or [])
    if features:
        return f"Takes {len(features)} columns: {_names(features, 6)} (a CSV is matched by these names)"
    return f"Takes samples of shape {shape}: an NPZ or an image folder" if shape else ""
