"""The Settings dialog's MLflow tracking URI (checked, saved, cleared) and the runs Start begins mirrored there
(no run starts: the controller's start is replaced)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLineEdit

from app.flows.live_run import with_mirror
from app.shell.settings import AppSettings
from app.shell.settings_dialog import SettingsDialog
from core.config import Config


def test_settings_dialog_checks_the_uri_saves_it_and_clears_it(qtbot: Any) -> None:
    settings = AppSettings()
    dialog = SettingsDialog(settings)
    qtbot.addWidget(dialog)
    edit = dialog.findChild(QLineEdit, "edit_mlflow_uri")
    assert edit is dialog.edit_mlflow_uri and edit.text() == ""

    edit.setText("localhost:5000")  # no scheme: not a URI MLflow takes
    dialog.accept()
    error = dialog.label_error.text()
    assert error.startswith("Tracking URI must be an MLflow tracking URI (http://HOST:PORT")  # the field's label
    assert '"localhost:5000"' in error and "\n" not in error
    assert not dialog.label_error.isHidden() and dialog.result() != QDialog.DialogCode.Accepted
    assert settings.mlflow_uri == ""  # nothing saved
    edit.setText("http://localhost:5000")
    assert dialog.label_error.isHidden()  # typing takes the error away

    dialog.accept()
    assert dialog.result() == QDialog.DialogCode.Accepted
    settings.sync()
    assert AppSettings().mlflow_uri == "http://localhost:5000"  # remembered for the next session

    again = SettingsDialog(AppSettings())
    qtbot.addWidget(again)
    assert again.edit_mlflow_uri.text() == "http://localhost:5000"
    again.edit_mlflow_uri.clear()
    again.accept()
    assert AppSettings().mlflow_uri == ""  # cleared


def test_settings_from_the_menu_reach_the_runs_start_begins(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    window = make_window()
    qtbot.waitUntil(lambda: window.action_start.isEnabled(), timeout=30_000)
    started: list[Config] = []
    window.controller.start = lambda cfg, runs_dir="runs", name=None: started.append(cfg)

    window.action_start.trigger()  # no setting: not mirrored
    assert started[-1].tracking.mlflow == ""

    store = f"sqlite:///{tmp_path / 'store.db'}"
    window.findChild(QAction, "action_settings").trigger()
    dialog = window.findChild(QDialog, "dialog_settings")
    assert dialog is not None and dialog.isVisible()
    dialog.findChild(QLineEdit, "edit_mlflow_uri").setText(store)
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5_000)
    assert window.settings.mlflow_uri == store

    window.action_start.trigger()
    assert started[-1].tracking.mlflow == store
    assert f"mirrored to MLflow at {store}" in window.log_pane.toPlainText()
    assert window.settings.last_config_toml and "store.db" not in window.settings.last_config_toml  # the user's own

    own = window.panel.config().replace("tracking", mlflow="http://tracking.example:5000")
    window.panel.set_config(own)
    window.action_start.trigger()
    assert started[-1].tracking.mlflow == "http://tracking.example:5000"  # a config's own URI comes first

    window.panel.set_config(own.replace("tracking", mlflow=""))
    window.settings.q.setValue("tracking/mlflow", "nowhere")  # written by hand, not through Settings…
    window.action_start.trigger()
    assert len(started) == 3  # not started
    assert window.banner.isVisible() and "Settings" in window.banner.text and '"nowhere"' in (window.banner.text)


def test_with_mirror_keeps_a_configs_own_uri() -> None:
    own = Config().replace("tracking", mlflow="http://a:5000")
    assert with_mirror(own, "http://b:5000").tracking.mlflow == "http://a:5000"
    assert with_mirror(Config(), "http://b:5000").tracking.mlflow == "http://b:5000"
    assert with_mirror(Config(), "") == Config()
