"""The Fork dialog: the parent run's live settings, shown with its own values, to edit before forking.

A fork starts from the parent's config (the one in its run folder) and changes
only what is edited here: the keys the field table marks live (learning rate,
weight decay, batch size, epochs, ...). Each key's widget is built from its
``Field``, as the panel's are; the values are checked through
``Config.with_changes``, so the dialog says the engine's own error.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from app.panel.fields import Bindings, float_text, form_of, int_spin, line_edit, value_of
from core.config import FIELDS, LIVE_KEYS, Config, ConfigError, to_dict

# a key's label where its name alone says too little; the others are their names, capitalised
LABELS = {"optim.lr": "Learning rate"}


def label_of(key: str) -> str:
    return LABELS.get(key) or key.partition(".")[2].replace("_", " ").capitalize()


def _widget(key: str) -> QWidget:
    name = "fork_" + key.replace(".", "_")
    return int_spin(key, name) if FIELDS[key].type == "int" else line_edit(key, name)


class ForkDialog(QDialog):
    """Edit the parent's live keys; ``changes()`` are the ones that differ from the parent's config."""

    def __init__(
        self,
        run_name: str,
        parent_cfg: Config,
        proposed: dict[str, Any] | None = None,
        min_epochs: int = 1,
        note: str = "",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("dialog_fork")
        self.setWindowTitle(f"Fork {run_name}")
        self.parent_cfg = parent_cfg
        layout = QVBoxLayout(self)
        intro = QLabel(
            f"A new run from the last checkpoint of <b>{run_name}</b>, with its settings "
            "but for what you change here." + (f"<br>{note}" if note else "")
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        box = QWidget()
        form = form_of(box)
        self.widgets = {key: _widget(key) for key in LIVE_KEYS}
        for key, widget in self.widgets.items():
            form.addRow(label_of(key), widget)
        layout.addWidget(box)
        epochs = self.widgets.get("train.epochs")
        if epochs is not None:
            epochs.setMinimum(max(1, min_epochs))  # type: ignore[attr-defined]  # the epochs key is a spin box
        self.bindings = Bindings(self.widgets)
        self.bindings.show(parent_cfg.with_changes(dict(proposed or {})))
        self.label_error = QLabel(objectName="label_fork_error")
        self.label_error.setWordWrap(True)
        self.label_error.hide()
        layout.addWidget(self.label_error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Fork")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        for widget in self.widgets.values():
            signal = getattr(widget, "valueChanged", None) or widget.textChanged  # type: ignore[attr-defined]  # a spin box or a line edit
            signal.connect(self._check)
        self._check()

    def changes(self) -> dict[str, Any]:
        """The edited keys whose values differ from the parent's; raises ConfigError on a bad value."""
        raw = to_dict(self.parent_cfg)
        self.bindings.take(raw)
        edited = {key: raw[key.partition(".")[0]][key.partition(".")[2]] for key in self.widgets}
        cfg = self.parent_cfg.with_changes(edited)  # checks every value as the engine will
        return {key: value_of(cfg, key) for key in self.widgets if value_of(cfg, key) != value_of(self.parent_cfg, key)}

    def set_value(self, key: str, value: Any) -> None:
        """Type ``value`` into the key's widget, as a user would."""
        widget = self.widgets[key]
        if hasattr(widget, "setValue"):
            widget.setValue(value)
        else:
            widget.setText(float_text(value) if isinstance(value, float) else str(value))  # type: ignore[attr-defined]  # not a spin box: a line edit

    def _check(self, *_args: Any) -> None:
        try:
            self.changes()
            error = ""
        except ConfigError as exc:
            error = str(exc)
        self.label_error.setText(error)
        self.label_error.setVisible(bool(error))
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not error)
