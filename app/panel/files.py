"""The files the window reads and writes for the panel: config TOML files, data files, the runs folder.

File dialogs live here (the panel asks for them by signal); each remembers its
folder in the settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QFileDialog

from core.config import ConfigError, load_config, save_config

if TYPE_CHECKING:
    from app.main_window import MainWindow

DATA_FILTERS = {
    "csv": "CSV files (*.csv)",
    "npz": "NumPy archives (*.npz)",
    "custom": "Python files (*.py)",
    "weights": "Weights in timm's key layout (*.safetensors *.pth *.pt *.bin)",
}


class ConfigFiles:
    """Open and save config files, choose data files and the runs folder."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window

    def open(self, path: str | Path) -> bool:
        w = self.window
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            w.panel.show_error(str(exc))
            w.show_error(str(exc))
            return False
        w.panel.set_config(cfg)
        w.settings.set_last_dir("config", path)
        w.log_pane.add_message("state", f"loaded config {path}")
        return True

    def save(self, path: str | Path) -> bool:
        w = self.window
        cfg = w.panel.try_config()
        if cfg is None:
            w.show_error(w.panel.config_error())
            return False
        try:
            save_config(cfg, path)
        except OSError as exc:
            w.show_error(f"could not save {path}: {exc.strerror or exc}")
            return False
        w.settings.set_last_dir("config", path)
        w.log_pane.add_message("state", f"saved config {path}")
        return True

    def ask_open(self) -> None:
        w = self.window
        path, _ = QFileDialog.getOpenFileName(
            w, "Open config", w.settings.last_dir("config"), "TOML config (*.toml);;All files (*)"
        )
        if path:
            self.open(path)

    def ask_save(self) -> None:
        w = self.window
        default = str(Path(w.settings.last_dir("config")) / "config.toml")
        path, _ = QFileDialog.getSaveFileName(w, "Save config", default, "TOML config (*.toml)")
        if path:
            if not path.endswith(".toml"):
                path += ".toml"
            self.save(path)

    def browse_data(self, kind: str) -> None:
        """A data file or folder for the panel (``kind`` as ConfigPanel.browse_requested says)."""
        w = self.window
        start = w.settings.last_dir("data")
        if kind == "images":
            path = QFileDialog.getExistingDirectory(w, "Image folder (one sub-folder per class)", start)
        else:
            path, _ = QFileDialog.getOpenFileName(w, "Choose a file", start, DATA_FILTERS[kind] + ";;All files (*)")
        if not path:
            return
        w.settings.set_last_dir("data", path)
        if kind == "custom":
            w.panel.model.choose_custom_model_file(path)
        elif kind == "weights":
            w.panel.model.choose_weights_file(path)
        else:
            w.panel.add_source(f"{kind}:{path}")

    def ask_runs_dir(self) -> None:
        w = self.window
        path = QFileDialog.getExistingDirectory(w, "Runs folder", str(Path(w.runs_dir).resolve()))
        if path:
            w.settings.runs_dir = path
            w.runs_dir_override = None
            w.log_pane.add_message("state", f"new runs go to {path}")
            w.runs_view.set_runs_dir(w.runs_dir)
