"""Persistent GUI settings (QSettings, INI format) with typed accessors; the few the user sets are edited in
the Settings dialog (app.shell.settings_dialog).

Tests point QSettings at a temporary folder with ``QSettings.setPath`` (see
tests/app/conftest.py) so they never touch the user's own settings.

A user without saved settings starts from the shipped first-run config
(resources/configs/first-run.toml), not from ``Config()``'s defaults: a run long
enough to watch, pause and edit. The command line's defaults stay ``Config()``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

ORGANIZATION = "TrainDesk"
APPLICATION = "TrainDesk"
DEFAULT_RUNS_DIR = "runs"
FIRST_RUN_CONFIG = Path(__file__).resolve().parents[2] / "resources" / "configs" / "first-run.toml"


def open_settings() -> QSettings:
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION)


class AppSettings:
    """The handful of values the window remembers between sessions."""

    # What a window without a saved config starts from; None: Config()'s defaults (the tests' windows)
    first_run_config: Path | None = FIRST_RUN_CONFIG

    def __init__(self, qsettings: QSettings | None = None) -> None:
        self.q = qsettings if qsettings is not None else open_settings()

    def _get(self, key: str, default: Any, kind: type) -> Any:
        value = self.q.value(key, default)
        if kind is bool:
            return value in (True, "true", "1", 1) if not isinstance(value, bool) else value
        try:
            return kind(value)
        except (TypeError, ValueError):
            return default

    # -- window ----------------------------------------------------------------
    @property
    def geometry(self) -> QByteArray | None:
        value = self.q.value("window/geometry")
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    @geometry.setter
    def geometry(self, value: QByteArray) -> None:
        self.q.setValue("window/geometry", value)

    def splitter_state(self, name: str) -> QByteArray | None:
        value = self.q.value(f"window/{name}")
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    def set_splitter_state(self, name: str, value: QByteArray) -> None:
        self.q.setValue(f"window/{name}", value)

    # -- run and config --------------------------------------------------------
    @property
    def last_config_toml(self) -> str:
        return self._get("config/last", "", str)

    @last_config_toml.setter
    def last_config_toml(self, text: str) -> None:
        self.q.setValue("config/last", text)

    @property
    def start_config_toml(self) -> str:
        """The config the window opens with: the last one saved, else the first-run config ("" if neither)."""
        saved = self.last_config_toml
        if saved or self.first_run_config is None:
            return saved
        try:
            return self.first_run_config.read_text(encoding="utf-8")
        except OSError:  # an install without resources: the defaults
            return ""

    @property
    def runs_dir(self) -> str:
        return self._get("runs/dir", DEFAULT_RUNS_DIR, str) or DEFAULT_RUNS_DIR

    @runs_dir.setter
    def runs_dir(self, path: str) -> None:
        self.q.setValue("runs/dir", path)

    @property
    def mlflow_uri(self) -> str:
        """The MLflow tracking URI the window's runs are mirrored to ("" for none; Settings… checks it)."""
        return self._get("tracking/mlflow", "", str).strip()

    @mlflow_uri.setter
    def mlflow_uri(self, uri: str) -> None:
        self.q.setValue("tracking/mlflow", uri.strip())

    def last_dir(self, kind: str) -> str:
        """The folder a file dialog of this kind (config, data, run) last used."""
        return self._get(f"dirs/{kind}", str(Path.cwd()), str)

    def set_last_dir(self, kind: str, path: str | Path) -> None:
        p = Path(path)
        self.q.setValue(f"dirs/{kind}", str(p if p.is_dir() else p.parent))

    # -- view ------------------------------------------------------------------
    @property
    def theme(self) -> str:
        value = self._get("view/theme", "light", str)
        return value if value in ("light", "dark") else "light"

    @theme.setter
    def theme(self, name: str) -> None:
        self.q.setValue("view/theme", name)

    @property
    def x_axis(self) -> str:
        value = self._get("view/x_axis", "step", str)
        return value if value in ("step", "time") else "step"

    @x_axis.setter
    def x_axis(self, mode: str) -> None:
        self.q.setValue("view/x_axis", mode)

    @property
    def log_y(self) -> bool:
        return self._get("view/log_y", False, bool)

    @log_y.setter
    def log_y(self, on: bool) -> None:
        self.q.setValue("view/log_y", on)

    @property
    def smoothing(self) -> float:
        value = self._get("view/smoothing", 0.6, float)
        return min(0.99, max(0.0, value))

    @smoothing.setter
    def smoothing(self, alpha: float) -> None:
        self.q.setValue("view/smoothing", alpha)

    def sync(self) -> None:
        self.q.sync()
