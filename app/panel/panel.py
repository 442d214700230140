"""The configuration panel: every Config key as a widget, and back.

``config()`` builds a validated :class:`core.config.Config` (it raises
ConfigError with the engine's own one-line message), ``set_config()`` shows
one. The keys are shown by groups, each binding its keys to widgets built
from core.config's field table: Data (app.panel.data_group), Model, Parallel and
Training (app.panel.sections) and Tuning (app.panel.tuning_group). The panel owns
the modes, the view of a past run's settings, and the background description
of the dataset and count of the model's parameters. A built-in model that
cannot take the described samples is switched to one that can (``notice``
says so). It shows its groups' widgets under their own names (``panel.spin_epochs``).
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QIcon
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.panel.data_group import DataGroup
from app.panel.describe import SourceDescriber
from app.panel.sections import ModelGroup, ParallelGroup, TrainingGroup
from app.panel.tuning_group import TuningGroup
from core.config import LIVE_KEYS, Config, ConfigError, from_dict, to_dict
from core.services.models import takes_samples

PLAIN_KIND = "mlp"  # the model a table (or any flat samples) gets when the chosen one needs images

MODES = ("edit", "locked", "live", "view")


def live_bindings(groups: Any) -> dict[str, QWidget]:
    """The widget of each live key among the groups' bindings (ValueError naming a live key none shows)."""
    shown = {k: w for group in groups for k, w in group.bindings.widgets.items()}
    missing = [key for key in LIVE_KEYS if key not in shown]
    if missing:
        raise ValueError(f"live keys without a widget in the panel: {', '.join(missing)}")
    return {key: shown[key] for key in LIVE_KEYS}


class ConfigPanel(QWidget):
    """All settings of a run. Emits ``changed`` on every edit.

    Modes: ``edit`` (everything editable), ``locked`` (a run is starting or
    running), ``live`` (a paused run: only the live keys), ``view`` (a past run's
    settings, read-only except what Fork and Continue run may change, until
    "Use these settings").
    """

    changed = Signal()
    browse_requested = Signal(str)  # "csv" | "npz" | "images" | "custom" (the window owns file dialogs)
    mode_changed = Signal(str)
    problem_changed = Signal()  # the description of the dataset or model found a problem, or it went away
    notice = Signal(str)  # what the panel changed on its own (a model switched, a target proposed): one line

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._base = Config()
        self._loading = False
        self.describer = SourceDescriber(self)
        self._calls, self._refresh_timer = self.describer.calls, self.describer.timer

        self.mode = "edit"
        self._own_config: Config | None = None  # the user's settings while a run's are shown
        self._switched_model: tuple[str, str] | None = None  # (the user's kind, the one the panel put instead)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(8)
        layout.addWidget(self._build_view_header())
        self.data, self.model, self.parallel = DataGroup(), ModelGroup(), ParallelGroup()
        self.training, self.tuning = TrainingGroup(), TuningGroup()
        self._groups = (self.data, self.model, self.parallel, self.training, self.tuning)
        # The order of the decisions: what data, what model, how many processes, then details.
        for group in self._groups:
            layout.addWidget(group)
            self._adopt(group)
        self.data.browse_requested.connect(self.browse_requested)
        self.model.browse_requested.connect(self.browse_requested)
        self.data.columns_changed.connect(self._on_widget_changed)
        self.data.notice.connect(self.notice)
        self.tuning.augment_preview_requested.connect(self.show_augment_preview)
        self.augment_preview: Any = None  # the open AugmentPreviewDialog, if any
        self.label_config_error = QLabel(objectName="label_config_error")
        self.label_config_error.setWordWrap(True)
        self.label_config_error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label_config_error.hide()
        layout.addWidget(self.label_config_error)
        layout.addStretch(1)

        for w in self.findChildren(QWidget):
            self._connect_change(w)
        self.set_config(Config())
        # once the window is up: listing the devices imports torch
        QTimer.singleShot(0, self, lambda: self.parallel.list_devices(self._calls))

    def _adopt(self, group: QWidget) -> None:
        """Show the group's widgets and actions as the panel's own (``panel.combo_dataset``)."""
        for name, value in vars(group).items():
            if not name.startswith("_") and isinstance(value, (QWidget, QAction)) and not hasattr(self, name):
                setattr(self, name, value)

    def _build_view_header(self) -> QWidget:
        self.frame_view = QGroupBox(objectName="frame_run_settings")
        row = QVBoxLayout(self.frame_view)
        row.setContentsMargins(6, 4, 6, 4)
        self.label_view = QLabel(objectName="label_run_settings")
        self.label_view.setWordWrap(True)
        buttons = QHBoxLayout()
        self.button_use_settings = QPushButton("Use these settings", objectName="button_use_settings")
        self.button_use_settings.setToolTip("Make the shown run's settings yours, to edit and Start")
        self.button_use_settings.clicked.connect(self.use_shown_config)
        self.button_my_settings = QPushButton("Back to mine", objectName="button_my_settings")
        self.button_my_settings.setToolTip("Show your own settings again")
        self.button_my_settings.clicked.connect(self.restore_own_config)
        buttons.addWidget(self.button_use_settings)
        buttons.addWidget(self.button_my_settings)
        buttons.addStretch(1)
        row.addWidget(self.label_view)
        row.addLayout(buttons)
        self.frame_view.hide()
        return self.frame_view

    # -- modes -------------------------------------------------------------------
    def _inputs(self) -> list[QWidget]:
        kinds = (QComboBox, QSpinBox, QDoubleSpinBox, QCheckBox, QToolButton)
        out: list[QWidget] = []
        for w in self.findChildren(QWidget):
            if isinstance(w, kinds) or (
                isinstance(w, QLineEdit) and not isinstance(w.parent(), (QSpinBox, QDoubleSpinBox, QComboBox))
            ):
                out.append(w)
        return out

    def live_widgets(self) -> dict[str, QWidget]:
        """The widget of each key a paused run accepts (and a fork of a shown run may change)."""
        return live_bindings(self._groups)

    def set_mode(self, mode: str) -> None:
        """See the class docstring."""
        assert mode in MODES, mode
        self.mode = mode
        self.data.editable = mode == "edit"
        super().setEnabled(mode != "locked")
        if mode == "live":
            allowed = set(self.live_widgets().values())
        elif mode == "view":
            allowed = set(self.live_widgets().values())
        else:
            allowed = None
        for w in self._inputs():
            if w.parent() is self.frame_view or w in (self.button_use_settings, self.button_my_settings):
                continue
            w.setEnabled(allowed is None or w in allowed)
        self.frame_view.setVisible(mode == "view")
        if mode == "edit":
            self._update_visibility()
        self.mode_changed.emit(mode)

    def show_run_config(self, cfg: Config, run_name: str) -> None:
        """Show a past run's settings, read-only (until use_shown_config); the user's are kept aside."""
        if self.mode != "view":
            try:
                self._own_config = self.config()
            except ConfigError:
                self._own_config = self._base
        self.set_config(cfg)
        self.name_shown_run(run_name)
        self.set_mode("view")

    def name_shown_run(self, run_name: str) -> None:
        """The shown run's name (again, once it was renamed)."""
        self.label_view.setText(
            f"Settings of <b>{html.escape(run_name)}</b>. Fork starts from the learning rate, "
            "weight decay, batch size and epochs shown here; Continue run uses the epochs."
        )

    @property
    def showing_run_config(self) -> bool:
        """The panel shows a run's settings; the user's own are kept aside (``own_config``)."""
        return self._own_config is not None

    def own_config(self) -> Config | None:
        """The user's own settings: those kept aside while a run's are shown, else those shown."""
        if self._own_config is not None:
            return self._own_config
        try:
            return self.config()
        except ConfigError:
            return None

    def use_shown_config(self) -> None:
        self._own_config = None
        self.set_mode("edit")
        self._refresh_timer.start()  # settings now the user's: their model is fitted to their data

    def restore_own_config(self) -> None:
        own, self._own_config = self._own_config, None
        if own is not None:
            self.set_config(own)
        self.set_mode("edit")

    def live_changes(self, current: Config) -> dict[str, Any]:
        """The live keys whose shown values differ from ``current`` (raises ConfigError on a bad value)."""
        shown = self.config()
        out = {}
        for key in LIVE_KEYS:
            section, name = key.split(".")
            new, old = getattr(getattr(shown, section), name), getattr(getattr(current, section), name)
            if new != old:
                out[key] = new
        return out

    def _connect_change(self, w: QWidget) -> None:
        signal = None
        if isinstance(w, QComboBox) and w.isEditable():  # typed or picked
            signal = w.currentTextChanged
        elif isinstance(w, QComboBox):
            signal = w.currentIndexChanged
        elif isinstance(w, (QSpinBox, QDoubleSpinBox)):
            signal = w.valueChanged
        elif isinstance(w, QLineEdit) and not isinstance(w.parent(), (QSpinBox, QDoubleSpinBox, QComboBox)):
            signal = w.textChanged
        elif isinstance(w, QCheckBox):
            signal = w.toggled
        if signal is not None:
            signal.connect(self._on_widget_changed)

    # -- Config <-> widgets ------------------------------------------------------
    def set_config(self, cfg: Config) -> None:
        self._loading = self.data.loading = True
        try:
            self._base = cfg
            self._switched_model = None
            for group in self._groups:
                group.show_config(cfg)
        finally:
            self._loading = self.data.loading = False
        self._update_visibility()
        self.show_error("")
        self._refresh_timer.start()

    def add_source(self, source: str, select: bool = True) -> None:
        """Add a csv:/npz:/images: source to the dataset picker (once)."""
        self.data.add_source(source, select)

    def remove_current_source(self) -> None:
        """Drop a file/folder source from the picker (e.g. one that failed); built-in ones stay."""
        self.data.remove_current_source()

    def shown_task(self) -> str:
        """train.task of the config shown (the dataset is described for it)."""
        return self._base.train.task

    def config(self) -> Config:
        """The config the widgets show; raises ConfigError naming the bad key."""
        raw = to_dict(self._base)
        for group in self._groups:
            group.take(raw)
        return from_dict(raw)

    def try_config(self) -> Config | None:
        """The config, or None after showing its error under the panel."""
        try:
            cfg = self.config()
        except ConfigError as exc:
            self.show_error(str(exc))
            return None
        self.show_error("")
        return cfg

    def config_error(self) -> str:
        """Why the shown settings are not a config ("" when they are)."""
        return self.label_config_error.text()

    def validation_error(self) -> str:
        """The engine's one line on what is wrong with the shown settings ("" when they are a config)."""
        try:
            self.config()
        except ConfigError as exc:
            return str(exc)
        return ""

    def show_error(self, message: str) -> None:
        self.label_config_error.setText(message)
        self.label_config_error.setVisible(bool(message))

    # -- reactions -------------------------------------------------------------
    def _on_widget_changed(self, *_args: Any) -> None:
        if self._loading:
            return
        self._update_visibility()
        self.show_error(self.validation_error())  # said as it is typed, gone once it is fixed
        self._refresh_timer.start()
        self.changed.emit()

    def _update_visibility(self) -> None:
        self.data.update_visibility()
        self.model.update_visibility()
        self.training.update_visibility()
        self.parallel.update_visibility(editable=self.isEnabled() and self.mode == "edit")
        if self.mode == "edit":  # a run's shown or live settings are as set_mode left them
            self.tuning.show_augment_for(self.data, self.model)

    def fit_model_to(self, info: Any) -> None:
        """A model that cannot take the described samples (a CNN or a pretrained backbone, a table's rows) becomes
        one that can (an MLP); the one switched from comes back when samples it takes are chosen again. Said by
        ``notice``."""
        if self.mode != "edit":
            return  # a run's settings are shown as they ran
        combo = self.model.combo_model
        kind = str(combo.currentData())
        switched, self._switched_model = self._switched_model, None

        def takes(kind: str) -> bool:  # a pretrained backbone takes image files, a built-in model what fits
            if self.model.backbone.kind(kind) is not None:
                return str(self.data.combo_dataset.currentData() or "").startswith("images:")
            return takes_samples(kind, info.input_shape, info.image_shape)

        if switched is not None and kind == switched[1] and takes(switched[0]):
            new, why = (
                switched[0],
                f"back to {combo.itemText(combo.findData(switched[0]))} for the images of {info.name}",
            )
        elif not takes(kind):
            self._switched_model = (kind, PLAIN_KIND)
            label = combo.itemText(combo.findData(kind))
            new = PLAIN_KIND
            why = f"to {combo.itemText(combo.findData(new))}: a {label} needs images, {info.name} has none"
        else:
            self._switched_model = switched if switched is not None and kind == switched[1] else None
            return
        combo.setCurrentIndex(combo.findData(new))
        self.notice.emit(f"Model switched {why}")

    def setEnabled(self, enabled: bool) -> None:
        super().setEnabled(enabled)
        if enabled and self.mode == "edit":
            self._update_visibility()

    def show_augment_preview(self) -> None:
        """A dialog with augmented copies of the data set's sample images, under the panel's [augment]."""
        cfg = self.try_config()
        if cfg is None or not self.data.images:
            return
        from app.panel.augment_preview import AugmentPreviewDialog

        if self.augment_preview is not None:
            self.augment_preview.close()
        self.augment_preview = AugmentPreviewDialog(cfg.augment, self.data.images, self)
        self.augment_preview.show()

    def set_icons(self, folder: QIcon) -> None:
        for button in (self.data.button_browse_data, self.model.button_browse_model, self.model.button_browse_weights):
            button.setIcon(folder)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonIconOnly)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Wait for background description jobs (at window close)."""
        self.describer.shutdown(timeout_s)
        if self.augment_preview is not None:
            self.augment_preview.wait(timeout_s)
