"""The Settings dialog (File → Settings…): what the user sets for the window itself, not for one run.

Its one setting is the MLflow tracking URI the window's runs are mirrored to (``AppSettings.mlflow_uri``): a
run Start begins gets it as ``tracking.mlflow`` unless its config names one, and the Runs tab's Mirror to MLflow
sends past runs there. OK checks the URI as the engine does (``core.services.tracking.check_uri``): a bad one is
said under the field, naming it, and nothing is saved; an empty field clears the setting.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from app.shell.settings import AppSettings
from core.config import ConfigError
from core.services.tracking import check_uri

SETTING_NAME = "Tracking URI"  # what a bad URI's message calls it: the field's label, in the MLflow group


def checked_uri(text: str) -> str:
    """``text`` as the setting keeps it: "" (none) or a tracking URI; ConfigError (one line naming it) if not one."""
    text = text.strip()
    return check_uri(text, SETTING_NAME) if text else ""


class SettingsDialog(QDialog):
    """Edit the window's settings; OK saves them into ``settings`` once they check, else says why."""

    def __init__(self, settings: AppSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("dialog_settings")
        self.setWindowTitle("Settings")
        self.settings = settings
        self.edit_mlflow_uri = QLineEdit(settings.mlflow_uri, objectName="edit_mlflow_uri")
        self.edit_mlflow_uri.setPlaceholderText("http://HOST:5000 or sqlite:///PATH")
        self.edit_mlflow_uri.setClearButtonEnabled(True)
        self.edit_mlflow_uri.setToolTip(
            "An MLflow tracking URI: a server (http://HOST:PORT, https://HOST), a local store (sqlite:///PATH), "
            "databricks, ...; empty: none"
        )
        self.edit_mlflow_uri.setMinimumWidth(self.fontMetrics().horizontalAdvance("x" * 46))
        self.edit_mlflow_uri.textChanged.connect(lambda _t: self.show_error(""))
        env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
        note = (
            "The runs you start here are mirrored to it as they train, unless their config names its own "
            "(<code>tracking.mlflow</code>). <i>Mirror to MLflow</i> in the Runs table's menu sends past runs there. Empty: "
            + (f"MLFLOW_TRACKING_URI ({env}), as set where TrainDesk started." if env else "no mirroring.")
        )
        self.label_mlflow_note = QLabel(note, objectName="label_mlflow_note")
        self.label_mlflow_note.setWordWrap(True)
        group = QGroupBox("MLflow", objectName="group_mlflow")
        form = QFormLayout(group)
        form.addRow("Tracking URI", self.edit_mlflow_uri)
        form.addRow(self.label_mlflow_note)
        self.label_error = QLabel(objectName="label_settings_error")
        self.label_error.setWordWrap(True)
        self.label_error.hide()
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, objectName="buttons_settings"
        )
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(group)
        layout.addWidget(self.label_error)
        layout.addStretch(1)
        layout.addWidget(self.buttons)

    def show_error(self, message: str) -> None:
        if message == self.label_error.text():
            return
        self.label_error.setText(message)
        self.label_error.setVisible(bool(message))
        self.adjustSize()  # room for the message, none left when it goes

    def accept(self) -> None:
        """Save what checks, and close; a bad URI stays in the field with the reason under it, unsaved."""
        try:
            uri = checked_uri(self.edit_mlflow_uri.text())
        except ConfigError as exc:
            self.show_error(str(exc))
            self.edit_mlflow_uri.setFocus()
            return
        self.settings.mlflow_uri = uri
        super().accept()


def edit_settings(parent: QWidget, settings: AppSettings, saved: Callable[[], None]) -> SettingsDialog:
    """Open the dialog over ``parent`` (window-modal; it returns at once); ``saved()`` once OK has saved."""
    dialog = SettingsDialog(settings, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.accepted.connect(saved)
    dialog.open()
    return dialog
