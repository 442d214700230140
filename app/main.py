"""Entry point: ``traindesk-gui``, ``traindesk gui`` and ``python -m app``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.shell.platform_check import check_platform_libraries
from app.shell.settings import APPLICATION, ORGANIZATION


def _warm_up_engine() -> None:
    """Start the forkserver (torch preloaded) in the background so the first Start is quick."""
    from core.services.runs import start

    start.warm_up()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="traindesk-gui", description="TrainDesk: train PyTorch models, watch live.")
    parser.add_argument("config", nargs="?", help="a TOML config to open")
    parser.add_argument("--runs-dir", help="where runs are written (default: the setting, ./runs)")
    parser.add_argument("--theme", choices=("light", "dark"), help="colour theme for this session")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    problem = check_platform_libraries()  # before Qt aborts with a message that names no package
    if problem:
        print(problem, file=sys.stderr)
        return 2

    QApplication.setOrganizationName(ORGANIZATION)
    QApplication.setApplicationName(APPLICATION)
    app = QApplication.instance() or QApplication([sys.argv[0]])
    _warm_up_engine()

    from app.main_window import MainWindow  # after QApplication: pyqtgraph reads it on import

    if args.runs_dir:  # remembered: the next start without --runs-dir uses it too
        from app.shell.settings import AppSettings

        AppSettings().runs_dir = str(Path(args.runs_dir).expanduser())
    window = MainWindow(runs_dir=args.runs_dir)
    if args.theme:
        window.set_dark(args.theme == "dark")
    if args.config and not window.open_config(args.config):
        print(window.panel.label_config_error.text(), file=sys.stderr)
    window.show()

    # Ctrl-C in the terminal closes the window (stopping a run without asking: the user
    # already said so) instead of being ignored while Qt's event loop runs C++ code;
    # a timer lets Python check for signals.
    def on_sigint(*_args: object) -> None:
        window.ask_before_close = False
        window.close()

    previous_sigint = signal.signal(signal.SIGINT, on_sigint)
    heartbeat = QTimer()
    heartbeat.start(250)
    heartbeat.timeout.connect(lambda: None)
    try:
        code = app.exec()
    finally:
        signal.signal(signal.SIGINT, previous_sigint)
        heartbeat.stop()
        window.controller.shutdown()  # a last guard: no worker outlives the GUI
    window.deleteLater()
    app.processEvents()
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
