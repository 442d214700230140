"""A Lightning run's TensorBoard logs imported in the Runs tab and compared with a TrainDesk run: its curves are
drawn in Compare with its values, and nothing offers to continue, fork or export it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QToolButton

from app.viewmodels.series import ema, without_spikes
from app.views.runs import COL
from tests.tensorboard_logs import lightning_log, train_loss, val_acc, val_loss
from tests.written_runs import classifier_run


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    """A finished TrainDesk run in the window's runs folder, written as a session writes one (no training: quick)."""
    return classifier_run(tmp_path / "runs", "20250101-100000-mine", 0.9)


def test_imported_lightning_curves_are_overlaid_in_compare(
    qtbot: Any, make_window: Any, trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = lightning_log(tmp_path / "lightning", epochs=3, batches=16, every=5)
    window = make_window()
    view = window.runs_view
    window.show_tab(view)
    qtbot.waitUntil(lambda: view.proxy.rowCount() == 1, timeout=20_000)

    # Import TensorBoard logs…: the folder dialog answers with the logs' folder of versions
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(log.path.parent))
    button = window.findChild(QToolButton, "button_import_tensorboard")
    with qtbot.waitSignal(view.imported, timeout=20_000) as imported:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    (run,) = imported.args[0]
    qtbot.waitUntil(lambda: view.selected_runs() == [run], timeout=20_000)  # listed, and selected
    row = view.model.rows[view.model.row_for(run)]
    assert row.status == "imported" and row.imported_from == str(log.path.resolve())
    assert view.proxy.mapFromSource(view.model.index(view.model.row_for(run), COL["status"])).data() == "imported"

    # Read-only: Fork is off and says why
    assert not window.action_fork.isEnabled() and "imported" in window.action_fork.toolTip()

    # Compare it with the TrainDesk run
    view.select_runs([trained, run])
    with qtbot.waitSignal(window.compare_view.compared, timeout=20_000):
        window.action_compare.trigger()
    compare = window.compare_view
    assert [r.imported for r in compare.runs] == [r.path == run for r in compare.runs]
    mine = [r.path for r in compare.runs].index(run)
    for panel in ("figure", "val_loss", "train_loss"):
        assert len(compare.curves[panel]) == 2  # both runs drawn in each
    compare.combo_x.setCurrentIndex(compare.combo_x.findData("epoch"))
    figure, vloss = compare.curves["figure"][mine], compare.curves["val_loss"][mine]
    assert list(figure.xData) == [1.0, 2.0, 3.0] and list(vloss.xData) == [1.0, 2.0, 3.0]
    assert list(figure.yData) == pytest.approx([val_acc(e) for e in range(3)], rel=1e-6)
    assert list(vloss.yData) == pytest.approx([val_loss(e) for e in range(3)], rel=1e-6)
    compare.combo_x.setCurrentIndex(compare.combo_x.findData("step"))
    tloss = compare.curves["train_loss"][mine]
    assert list(tloss.xData) == log.steps
    expected = ema(without_spikes(np.array([train_loss(s) for s in log.steps])), 0.6)
    assert list(tloss.yData) == pytest.approx(list(expected), rel=1e-6)
    assert compare.diff_keys() == []  # an imported run has no settings to differ in

    # The same logs again: nothing new, the status bar says so; a folder without logs: one line in the banner
    with qtbot.waitSignal(view.notice, timeout=20_000) as said:
        view.import_tensorboard(log.path)
    assert f"version_0 was imported already, as {run.name}" in said.args[0]
    assert "imported already" in window.statusBar().currentMessage()
    empty = tmp_path / "no-logs"
    empty.mkdir()
    view.import_tensorboard(empty)
    qtbot.waitUntil(window.banner.isVisible, timeout=20_000)
    assert str(empty) in window.banner.text and "\n" not in window.banner.text
    qtbot.waitUntil(lambda: not view.busy, timeout=20_000)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir() if p.is_dir()) == sorted([trained.name, run.name])
    with qtbot.waitSignal(view.imported, timeout=20_000):  # an import that works takes the banner away
        view.import_tensorboard(log.path)
    assert not window.banner.isVisible()

    # Opened, its curves are on the Training tab; Continue run and Export are off and say why
    window.open_run(run)
    qtbot.waitUntil(lambda: window.viewing_run == run, timeout=20_000)
    assert not window.action_continue_run.isEnabled() and not window.action_export.isEnabled()
    assert "imported" in window.action_export.toolTip() and "imported" in window.action_continue_run.toolTip()
    assert window.panel.mode == "edit"  # the user's own settings stay: the run has none
