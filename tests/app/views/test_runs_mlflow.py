"""MLflow in the Runs table: its MLflow column (link, run id, pending, nothing) and its Mirror to MLflow action
(no server: run folders are written by the test, and the action sends one to a local sqlite store)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices

from app.viewmodels.run_index import mirror_cell
from app.views.runs import COL
from app.views.runs.table import LINK_ROLE
from core.services.tracking import Mirrored
from tests.written_runs import classifier_run

SERVER = "http://127.0.0.1:5123"
RUN_ID = "0123456789abcdef0123456789abcdef"
PAGE = f"{SERVER}/#/experiments/7/runs/{RUN_ID}"
TIP = Qt.ItemDataRole.ToolTipRole


def mirrored(run: Path, uri: str, run_id: str = RUN_ID, ended: str = "FINISHED") -> Path:
    """``run`` as the mirror leaves it in ``mlflow.json`` after sending it to ``uri`` (``ended`` "": cut short)."""
    entry = {"run_id": run_id, "experiment_id": "7", "offset": 100, "ended": ended}
    (run / "mlflow.json").write_text(json.dumps({"mirrors": {uri: entry}}))
    return run


def cell(window: Any, run: Path, role: Any = None) -> Any:
    view = window.runs_view
    index = view.proxy.mapFromSource(view.model.index(view.model.row_for(run), COL["mirror"]))
    return index.data() if role is None else index.data(role)


def show_runs(qtbot: Any, window: Any, n: int) -> None:
    window.findChild(QAction, "action_show_runs").trigger()
    qtbot.waitUntil(lambda: window.runs_view.proxy.rowCount() == n, timeout=20_000)


# -- the column ------------------------------------------------------------------------------------------------
def test_mlflow_column_links_ids_pending_and_nothing(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    on_server = mirrored(classifier_run(runs, "20250101-100000-server", 0.9), SERVER)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    local = mirrored(classifier_run(runs, "20250101-110000-local", 0.8), store, run_id="fedcba9876543210" * 2)
    cut = mirrored(classifier_run(runs, "20250101-120000-cut", 0.7), SERVER, ended="")
    plain = classifier_run(runs, "20250101-130000-plain", 0.6)
    window = make_window()
    show_runs(qtbot, window, 4)
    header = window.runs_view.model.headerData(COL["mirror"], window.runs_view.table.horizontalHeader().orientation())
    assert header == "MLflow"

    assert cell(window, on_server) == "01234567 ↗" and cell(window, on_server, LINK_ROLE) == PAGE
    assert PAGE in cell(window, on_server, TIP)
    assert cell(window, local) == "fedcba98" and cell(window, local, LINK_ROLE) is None
    assert store in cell(window, local, TIP) and "fedcba9876543210" * 2 in cell(window, local, TIP)
    assert cell(window, cut) == "pending" and cell(window, cut, LINK_ROLE) is None
    assert f"traindesk runs --to-mlflow {SERVER} {cut}" in cell(window, cut, TIP)
    assert cell(window, plain) == "" and cell(window, plain, LINK_ROLE) is None

    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    table = window.runs_view.table
    for run in (local, on_server):  # a click on an id opens nothing, on a link its page
        row = window.runs_view.proxy.mapFromSource(window.runs_view.model.index(window.runs_view.model.row_for(run), 0))
        index = row.siblingAtColumn(COL["mirror"])
        table.scrollTo(index)
        qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=table.visualRect(index).center())
    assert [u.toString() for u in opened] == [PAGE]
    assert window.tabs.currentWidget() is window.runs_view  # a click opens the page, not the run


def test_a_live_run_mirrored_as_it_trains_is_not_pending(tmp_path: Path) -> None:
    run = tmp_path / "run"
    entry = Mirrored(SERVER, run_id=RUN_ID, experiment_id="7")  # not ended
    assert mirror_cell(run, {SERVER: entry}, live=True).link == PAGE
    assert mirror_cell(run, {SERVER: entry}, live=False).pending
    assert mirror_cell(run, {SERVER: Mirrored(SERVER)}, live=True).text == "sending…"  # no answer yet
    other = "sqlite:///x.db"
    both = {other: Mirrored(other, run_id="a" * 32, ended="FINISHED"), SERVER: entry}
    assert mirror_cell(run, both, live=True).text == "aaaaaaaa"  # the first, unless the window's URI is one
    shown = mirror_cell(run, both, live=True, prefer=SERVER)
    assert shown.link == PAGE and f"also mirrored to {other}" in shown.tip


# -- the action ------------------------------------------------------------------------------------------------
def test_mirror_to_mlflow_sends_a_past_run_to_a_local_store(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    run = classifier_run(tmp_path / "runs", "20250101-100000-a", 0.9)
    window = make_window()
    show_runs(qtbot, window, 1)
    mirror = window.findChild(QAction, "action_runs_mirror")
    assert not mirror.isEnabled()  # nothing selected
    window.runs_view.select_runs([run])
    assert mirror.isEnabled()

    mirror.trigger()  # no URI in the settings: says where to set one
    assert "Settings" in window.banner.text and not (run / "mlflow.json").exists()

    store = f"sqlite:///{tmp_path / 'store.db'}"
    window.settings.mlflow_uri = store
    mirror.trigger()
    assert not mirror.isEnabled()  # one at a time
    qtbot.waitUntil(lambda: len(cell(window, run) or "") == 8, timeout=120_000)  # the store's run id
    run_id = json.loads((run / "mlflow.json").read_text())["mirrors"][store]["run_id"]
    assert run_id.startswith(cell(window, run))
    sent = MlflowClient(tracking_uri=store).get_run(run_id)
    assert sent.info.status == "FINISHED" and sent.data.metrics  # the run and its figures are there
    assert f"mirrored 1 run(s) to {store}" in window.log_pane.toPlainText()
    qtbot.waitUntil(lambda: mirror.isEnabled(), timeout=10_000)


def test_a_mirror_that_fails_says_so_in_one_line(
    qtbot: Any, make_window: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.views.runs import view
    from core.services.tracking import MirrorError

    def refused(run: Path, uri: str) -> Any:
        raise MirrorError(f"mlflow: {uri} does not answer (no connection)")

    monkeypatch.setattr(view, "mirror_run", refused)
    runs = [classifier_run(tmp_path / "runs", f"20250101-1{i}0000-r", 0.9) for i in range(2)]
    window = make_window()
    window.settings.mlflow_uri = SERVER
    show_runs(qtbot, window, 2)
    window.runs_view.select_runs(runs[:1])
    window.runs_view.action_mirror.trigger()
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=10_000)
    assert window.banner.text == f"could not mirror {runs[0].name}: mlflow: {SERVER} does not answer (no connection)"
    window.runs_view.select_runs(runs)
    window.runs_view.action_mirror.trigger()
    qtbot.waitUntil(lambda: "2 of 2" in window.banner.text, timeout=10_000)
    assert "\n" not in window.banner.text
