"""The window's tuning parts: the Tuning group, the lr finder dialog, the Search tab."""

from __future__ import annotations

from typing import Any

from app.panel.panel import ConfigPanel
from app.views.lr_finder import LRFinderDialog
from app.views.search import SearchView
from core.config import Config, apply_overrides


def test_tuning_group_round_trips(qtbot: Any) -> None:
    panel = ConfigPanel()
    qtbot.addWidget(panel)
    try:
        cfg = apply_overrides(
            Config(),
            [
                'schedule.kind="cosine"',
                "schedule.min_lr=0.001",
                "schedule.warmup_steps=7",
                "train.early_stop_patience=3",
                'train.monitor="val_accuracy"',
                'parallel.precision="bf16-mixed"',
            ],
        )
        panel.set_config(cfg)
        assert panel.config() == cfg
        panel.tuning.edit_min_lr.setText("lots")
        assert panel.try_config() is None and "schedule.min_lr" in panel.label_config_error.text()
    finally:
        qtbot.waitUntil(lambda: not panel._refresh_timer.isActive() and not panel._calls.busy, timeout=20_000)
        panel.shutdown()


def test_augment_settings_round_trip_and_preview_a_grid(qtbot: Any) -> None:
    panel = ConfigPanel()
    qtbot.addWidget(panel)
    try:
        t = panel.tuning
        qtbot.waitUntil(lambda: panel.data.images != (), timeout=20_000)  # digits described: sample images
        assert not t.button_augment_preview.isEnabled()  # augmentation is off by default
        cfg = apply_overrides(
            Config(), ["augment.crop_scale=0.333", "augment.hflip=true", "augment.rotation=12.5", "augment.jitter=0.2"]
        )
        panel.set_config(cfg)
        assert panel.config() == cfg  # 0.333 shows as 0.33 but is kept unless moved
        t.spin_rotation.setValue(20.0)
        assert panel.config().augment.rotation == 20.0
        qtbot.waitUntil(lambda: t.button_augment_preview.isEnabled(), timeout=20_000)
        t.button_augment_preview.click()
        dialog = panel.augment_preview
        assert dialog is not None and dialog.objectName() == "dialog_augment_preview"
        qtbot.waitUntil(lambda: bool(dialog.rows), timeout=30_000)  # computed off the GUI thread
        assert len(dialog.rows) == 6 and all(len(row) == 7 for row in dialog.rows)
        assert dialog.grid.layout().count() == 7 + 6 * 7  # a header row, then each sample and its copies
        assert "rotation ±20°" in dialog.label_status.text()
        dialog.close()
        t.check_hflip.setChecked(False)
        t.spin_crop_scale.setValue(1.0)
        t.spin_rotation.setValue(0.0)
        t.spin_jitter.setValue(0.0)
        assert not t.button_augment_preview.isEnabled()
    finally:
        qtbot.waitUntil(lambda: not panel._refresh_timer.isActive() and not panel._calls.busy, timeout=20_000)
        panel.shutdown()


def test_search_view_shows_trials_live_with_pruned_marked(qtbot: Any) -> None:
    view = SearchView()
    qtbot.addWidget(view)
    view.add_records(
        [
            {
                "kind": "trial",
                "worker": 0,
                "trial": 0,
                "state": "running",
                "params": {"optim.lr": 0.1, "model.hidden": [64]},
            },
            {
                "kind": "trial",
                "worker": 1,
                "trial": 1,
                "state": "running",
                "params": {"optim.lr": 1e-4, "model.hidden": [32]},
            },
            {"kind": "eval", "worker": 1, "trial": 1, "epoch": 1, "val_accuracy": 0.1, "val_loss": 2.3},
            {"kind": "trial", "worker": 1, "trial": 1, "state": "pruned", "epoch": 1, "value": 0.1},
            {"kind": "trial", "worker": 0, "trial": 0, "state": "complete", "epoch": 3, "value": 0.95},
            {
                "kind": "trial",
                "worker": 0,
                "trial": 2,
                "state": "running",
                "params": {"optim.lr": 0.05, "model.hidden": [64]},
            },
            {"kind": "trial", "worker": 0, "trial": 2, "state": "complete", "epoch": 3, "value": 0.9},
        ]
    )
    table = view.table_trials
    assert table.rowCount() == 3
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert headers[:2] == ["trial", "state"] and "optim.lr" in headers and "model.hidden" in headers
    assert table.item(1, 1).text() == "pruned" and "pruned" in table.item(1, 0).toolTip()
    assert "best: trial 0" in view.label_search_best.text() and "1 pruned" in view.label_search_best.text()
    assert len(view.plot_search_parallel.getPlotItem().listDataItems()) == 2
    view.show_summary({"trials": [], "importance": {"optim.lr": 0.9, "model.hidden": 0.1}})
    assert "optim.lr 90%" in view.label_importance.text()


def test_lr_finder_dialog_suggests_and_hands_the_rate_over(qtbot: Any) -> None:
    dialog = LRFinderDialog(Config())
    qtbot.addWidget(dialog)
    got: list[float] = []
    dialog.use_lr.connect(got.append)
    dialog.run()
    qtbot.waitUntil(lambda: dialog.result is not None, timeout=60_000)
    qtbot.waitUntil(lambda: not dialog.running, timeout=10_000)
    assert dialog.button_lr_use.isEnabled() and "Suggested learning rate" in dialog.label_lr_suggestion.text()
    dialog.button_lr_use.click()
    assert got == [dialog.result.suggestion]


def test_window_has_the_search_tab_and_the_lr_finder(make_window: Any) -> None:
    window = make_window()
    assert window.tabs.indexOf(window.search_view) >= 0
    assert window.findChild(type(window.action_lr_find), "action_lr_find") is window.action_lr_find


def test_augmentation_is_off_where_it_changes_nothing_and_says_why(qtbot: Any, tmp_path: Any) -> None:
    panel = ConfigPanel()
    qtbot.addWidget(panel)
    t = panel.tuning
    widgets = (t.spin_crop_scale, t.check_hflip, t.spin_rotation, t.spin_jitter)
    try:
        qtbot.waitUntil(lambda: panel.data.images != (), timeout=20_000)  # digits: images, augmented
        assert all(w.isEnabled() for w in widgets)
        table = tmp_path / "t.csv"
        table.write_text("a,b,label\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(40)))
        panel.set_config(Config().replace("data", source=f"csv:{table}"))
        qtbot.waitUntil(lambda: not t.spin_rotation.isEnabled(), timeout=20_000)
        assert not any(w.isEnabled() for w in widgets)
        assert t.spin_rotation.toolTip() == "augmentation changes images: this data set has none"
        head = Config().replace("data", source=f"images:{tmp_path}").replace("model", kind="timm:resnet18")
        panel.set_config(head)  # a head on cached features: the images are never seen again
        qtbot.waitUntil(lambda: "cached features" in t.spin_rotation.toolTip(), timeout=20_000)
        assert not t.check_hflip.isEnabled()
        panel.set_config(head.replace("model", finetune="full"))
        qtbot.waitUntil(lambda: t.spin_rotation.isEnabled(), timeout=20_000)
        assert t.spin_rotation.toolTip() != "" and "cached" not in t.spin_rotation.toolTip()
    finally:
        qtbot.waitUntil(lambda: not panel._refresh_timer.isActive() and not panel._calls.busy, timeout=20_000)
        panel.shutdown()
