"""Regenerate the README's screenshots from real runs: light and dark, a sweep, a comparison.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/screenshots.py [--out docs]

Trains digits runs in a temporary runs folder (about a minute on 2 cores) and
saves docs/screenshot.png, screenshot-dark.png, screenshot-sweep.png,
screenshot-compare.png and screenshot-runs.png (1280x800) and
screenshot-900x600.png with QWidget.grab().
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QCoreApplication, QSettings
from PySide6.QtWidgets import QApplication


def wait(app: QApplication, cond: Callable[[], object], timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("screenshot run took too long")
        app.processEvents()
        time.sleep(0.02)


def settle(app: QApplication, seconds: float = 0.5) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="traindesk-shots-"))
    QCoreApplication.setOrganizationName("TrainDesk-screenshots")
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp / "settings"))
    app = QApplication.instance() or QApplication([])
    from app.main_window import MainWindow
    from core.config import Config

    window = MainWindow(runs_dir=str(tmp / "runs"))
    window.ask_before_close = False
    window.resize(1280, 800)
    window.show()
    settle(app)

    # 1. Hogwild, three workers: a pause, the learning rate lowered, resumed.
    window.panel.set_config(Config().replace("train", epochs=200).replace("parallel", workers=3))
    window.action_start.trigger()
    wait(app, lambda: window.controller.state == "running" and window.progress_run.value() > 400)
    window.action_pause.trigger()
    wait(app, lambda: window.panel.mode == "live")
    settle(app, 1.5)
    window.panel.edit_lr.setText("0.01")
    window.action_resume.trigger()
    wait(app, lambda: window.controller.ended)
    window.runs_view.refresh()
    settle(app, 1.0)
    window.tabs.setCurrentWidget(window.plots)
    settle(app)
    window.grab().save(str(out / "screenshot.png"))
    window.action_dark.trigger()
    settle(app)
    window.grab().save(str(out / "screenshot-dark.png"))
    window.action_dark.trigger()

    # 2. A sweep of three learning rates.
    window.panel.set_config(
        Config()
        .replace("train", epochs=8)
        .replace("parallel", strategy="sweep", workers=3, sweep_lr=[0.2, 0.05, 0.005])
    )
    window.action_start.trigger()
    wait(app, lambda: window.controller.ended)
    settle(app, 1.0)
    window.grab().save(str(out / "screenshot-sweep.png"))

    # 3. Compare: the first run and a rerun with another learning rate and momentum.
    window.panel.set_config(
        Config().replace("train", epochs=200).replace("optim", lr=0.1, momentum=0.5).replace("parallel", workers=3)
    )
    window.action_start.trigger()
    wait(app, lambda: window.controller.ended)
    window.runs_view.refresh()
    window.tabs.setCurrentWidget(window.runs_view)
    wait(app, lambda: window.runs_view.proxy.rowCount() == 3 and not window.runs_view.busy)
    runs = [r.path for r in window.runs_view.model.rows if r.strategy == "hogwild"]
    window.runs_view.select_runs(runs)
    window.action_compare.trigger()
    wait(app, lambda: len(window.compare_view.runs) == 2)
    settle(app)
    window.grab().save(str(out / "screenshot-compare.png"))
    window.tabs.setCurrentWidget(window.runs_view)
    settle(app)
    window.grab().save(str(out / "screenshot-runs.png"))

    # 4. The smallest window the layout is made for: the last run's curves at 900x600.
    window.tabs.setCurrentWidget(window.plots)
    window.resize(900, 600)
    settle(app, 1.0)
    window.grab().save(str(out / "screenshot-900x600.png"))

    window.close()
    wait(app, lambda: not window.isVisible())
    print("saved to", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
