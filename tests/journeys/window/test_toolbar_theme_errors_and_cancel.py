"""Small-window toolbar, theme repaint of legends, errors that clear, Find fastest's progress and Cancel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QToolButton

import app.flows.advisor as advisor_flow


def _hidden_actions(window: Any) -> list[str]:
    return [
        a.objectName()
        for a in window.toolbar.actions()
        if a.objectName() and not window.toolbar.widgetForAction(a).isVisible()
    ]


def test_toolbar_fits_900x600_and_overflows_into_a_visible_button(make_window: Any, qtbot: Any) -> None:
    window = make_window()
    window.resize(900, 600)
    qtbot.waitUntil(lambda: window.width() <= 900, timeout=5_000)
    assert window.width() <= 900 and window.minimumSizeHint().width() <= 900

    def everything_shown() -> bool:
        button = window.toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
        return _hidden_actions(window) == [] and (button is None or not button.isVisible())

    qtbot.waitUntil(everything_shown, timeout=5_000)  # at 900 px every action is shown, no overflow button

    window.toolbar.setMaximumWidth(400)  # less room than the actions take

    def overflowed() -> bool:
        button = window.toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
        return (
            window.toolbar.width() <= 400
            and _hidden_actions(window) != []
            and button is not None
            and button.isVisible()
        )

    qtbot.waitUntil(overflowed, timeout=5_000)
    hidden = _hidden_actions(window)
    named = [a.objectName() for a in window.toolbar.actions() if a.objectName()]
    assert hidden and hidden == named[-len(hidden) :]  # the last ones go first
    more = window.toolbar.findChild(QToolButton, "qt_toolbar_ext_button")
    assert more is not None and more.isVisible() and not more.icon().isNull()  # what does not fit is one click away
    assert more.geometry().right() <= window.toolbar.width()


def test_theme_change_repaints_legend_text(make_window: Any) -> None:
    window = make_window()
    window.plots.add_records(
        [
            {
                "kind": "step",
                "t": 1.0 + i * 0.01,
                "worker": w,
                "epoch": 1,
                "step": i,
                "samples": i * 64,
                "loss": 1.0,
                "lr": 0.1,
            }
            for i in range(1, 30)
            for w in (0, 1)
        ]
    )
    window.plots.flush()
    legend = window.plots.loss.legends[0]
    assert [label.text for _s, label in legend.items] == ["worker 0", "worker 1", "mean"]

    def colours() -> set[str]:
        return {
            label.opts["color"] if isinstance(label.opts["color"], str) else QColor(label.opts["color"]).name()
            for _s, label in legend.items
        }

    def drawn(colour: str) -> bool:  # the text as drawn carries the colour
        return all(colour.lower() in label.item.toHtml().lower() for _s, label in legend.items)

    light = colours()
    window.action_dark.trigger()
    try:
        dark = colours()
        assert dark != light and all(QColor(c).lightness() > 150 for c in dark)
        assert drawn(next(iter(dark)))
        assert window.compare_view.plot.backgroundBrush().color().lightness() < 100
    finally:
        window.action_dark.trigger()


def test_errors_clear_when_their_cause_is_fixed(make_window: Any, qtbot: Any, tmp_path: Path) -> None:
    window = make_window()
    window.panel.edit_lr.setText("fast")
    window.live.start()  # Start is disabled; asked anyway, it says why in the banner
    assert window.banner.isVisible() and not window.action_start.isEnabled()
    window.panel.edit_lr.setText("0.05")
    assert not window.banner.isVisible() and not window.panel.label_config_error.isVisibleTo(window.panel)
    assert window.action_start.isEnabled()

    # a missing file as the dataset: said, and the parameter count comes back once a good one is picked
    panel = window.panel
    qtbot.waitUntil(lambda: "parameters" in panel.label_model_params.text(), timeout=30_000)
    panel.add_source(f"csv:{tmp_path / 'missing.csv'}")
    qtbot.waitUntil(lambda: panel.label_dataset_summary.text().startswith("⚠"), timeout=30_000)
    assert panel.label_model_params.text() == ""
    panel.remove_current_source()  # a failed source can be taken out of the list
    assert panel.combo_dataset.findData(f"csv:{tmp_path / 'missing.csv'}") < 0
    assert panel.combo_dataset.currentData() == "builtin:digits"
    qtbot.waitUntil(lambda: "parameters" in panel.label_model_params.text(), timeout=30_000)


@pytest.mark.slow
def test_find_fastest_shows_progress_and_cancels(make_window: Any, qtbot: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(advisor_flow, "ADVISOR_SECONDS", 2.0)
    window = make_window()
    window.action_find_fastest.trigger()
    assert window.advising
    assert window.progress_advisor.isVisible() and window.progress_advisor.maximum() >= 2
    assert window.button_cancel_advisor.isVisible()
    qtbot.waitUntil(lambda: window.progress_advisor.value() >= 1, timeout=60_000)  # one probe done
    window.button_cancel_advisor.click()
    qtbot.waitUntil(lambda: not window.advising, timeout=60_000)
    assert not window.progress_advisor.isVisible() and not window.button_cancel_advisor.isVisible()
    assert "find fastest: cancelled" in window.log_pane.toPlainText()
    assert window.action_start.isEnabled()
