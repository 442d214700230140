"""What a new user's walk through the config panel with real tables found: a model that cannot take the data
is switched and said, a long warning wraps inside the panel, a missing target is named with the table's
columns and one proposed, and the parameter count is the run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.config import Config

PENGUIN_COLUMNS = ("bill_length_mm", "island", "sex", "body_mass_g", "species")


def _penguins_csv(path: Path, rows: int = 60) -> Path:
    """Two numbers, two text categories (one with empty cells), a text target."""
    lines = [",".join(PENGUIN_COLUMNS)]
    for i in range(rows):
        sex = "" if i % 13 == 0 else ("male", "female")[i % 2]
        species = ("Adelie", "Gentoo", "Chinstrap")[i % 3]
        lines.append(f"{39 + i * 0.1:.1f},{('Biscoe', 'Dream', 'Torgersen')[i % 3]},{sex},{3000 + i * 20},{species}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _diamonds_csv(path: Path, rows: int = 60) -> Path:
    """Numbers, three text categories and an integer price."""
    lines = ["carat,cut,color,clarity,depth,price"]
    for i in range(rows):
        carat = 0.3 + i * 0.05
        cut, color, clarity = ("Fair", "Good", "Ideal", "Premium")[i % 4], "DEFGHIJ"[i % 7], ("SI1", "VS1", "IF")[i % 3]
        lines.append(f"{carat:.2f},{cut},{color},{clarity},{60 + i % 5 * 0.5:.1f},{int(400 + 2900 * carat)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _settled(qtbot: Any, panel: Any) -> None:
    """The panel's description and count are done, and no change is waiting to start another."""

    def idle() -> bool:
        return not panel._refresh_timer.isActive() and not panel._calls.busy

    qtbot.waitUntil(idle, timeout=30_000)
    qtbot.waitUntil(lambda: not panel.model.label_model_params.text().startswith("Counting"), timeout=30_000)
    qtbot.waitUntil(idle, timeout=30_000)


def _clipped(window: Any) -> list[str]:
    """The panel's visible widgets that do not lie wholly inside its scroll area's view, sideways."""
    from PySide6.QtCore import QCoreApplication, QPoint
    from PySide6.QtWidgets import QScrollArea, QWidget

    QCoreApplication.processEvents()  # the layouts' pending requests
    view = window.findChild(QScrollArea, "config_scroll").viewport()
    out = []
    for w in window.panel.findChildren(QWidget):
        x = w.mapTo(view, QPoint(0, 0)).x()
        if w.isVisible() and not 0 <= x <= x + w.width() <= view.width():
            out.append(f"{type(w).__name__} {w.objectName()!r}: x {x}, width {w.width()} in {view.width()}")
    return out


def _first_run(**model: Any) -> Config:
    """The first-run settings' shape: a CNN on the built-in digits (small, to count fast)."""
    return Config().replace("model", kind="cnn", channels=(8, 16), hidden=(32,), **model)


# -- 2: a table after the first run ----------------------------------------------------------------
@pytest.mark.parametrize("size", [(1280, 800), (900, 600)])
def test_a_table_chosen_after_the_first_run_switches_the_cnn_to_an_mlp_and_says_so(
    qtbot: Any, make_window: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    window = make_window()
    window.resize(*size)
    panel = window.panel
    panel.set_config(_first_run())
    qtbot.waitUntil(lambda: panel.model.label_model_params.text().endswith("parameters"), timeout=30_000)
    assert panel.config().model.kind == "cnn" and window.action_start.isEnabled()

    panel.add_source(f"csv:{_penguins_csv(tmp_path / 'penguins.csv')}")  # as the CSV file dialog does
    qtbot.waitUntil(lambda: panel.config().model.kind == "mlp", timeout=30_000)
    _settled(qtbot, panel)
    assert panel.model.label_model_params.text().endswith(" parameters")
    assert window.action_start.isEnabled() and window.label_state.text() == "Ready"
    said = window.statusBar().currentMessage()
    assert "Model switched to MLP: a CNN needs images, penguins has none" in said
    assert _clipped(window) == []

    panel.combo_dataset.setCurrentIndex(panel.combo_dataset.findData("builtin:digits"))  # images again
    qtbot.waitUntil(lambda: panel.config().model.kind == "cnn", timeout=30_000)
    assert "Model switched back to CNN for the images of digits" in window.statusBar().currentMessage()
    assert panel.config().model.channels == (8, 16)  # the user's CNN, as it was
    _settled(qtbot, panel)
    assert window.action_start.isEnabled()


def test_a_table_chosen_after_a_pretrained_backbone_switches_it_to_an_mlp_and_back(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    window = make_window()
    panel = window.panel
    from tests.trained_run import noise_photos

    photos = noise_photos(tmp_path / "photos", 3)
    backbone = "timm:resnet18.a1_in1k"  # a suggested backbone: the model list holds it
    panel.set_config(Config().replace("data", source=f"images:{photos}").replace("model", kind=backbone))
    assert panel.config().model.kind == backbone
    panel.add_source(f"csv:{_penguins_csv(tmp_path / 'penguins.csv')}")
    qtbot.waitUntil(lambda: panel.config().model.kind == "mlp", timeout=30_000)
    _settled(qtbot, panel)
    assert window.action_start.isEnabled()  # not off with the reason in a tooltip
    assert "Model switched to MLP: a " in window.statusBar().currentMessage()
    panel.combo_dataset.setCurrentIndex(panel.combo_dataset.findData(f"images:{photos}"))
    qtbot.waitUntil(lambda: panel.config().model.kind == backbone, timeout=30_000)
    _settled(qtbot, panel)


def test_a_model_the_user_picks_is_not_switched_back(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    window = make_window()
    panel = window.panel
    panel.set_config(_first_run().replace("data", source=f"csv:{_penguins_csv(tmp_path / 'penguins.csv')}"))
    qtbot.waitUntil(lambda: panel.config().model.kind == "mlp", timeout=30_000)  # an opened config, fitted too
    _settled(qtbot, panel)
    panel.combo_model.setCurrentIndex(panel.combo_model.findData("linear"))  # the user's own choice
    _settled(qtbot, panel)
    panel.combo_dataset.setCurrentIndex(panel.combo_dataset.findData("builtin:digits"))
    _settled(qtbot, panel)
    assert panel.config().model.kind == "linear"


@pytest.mark.parametrize("size", [(1280, 800), (900, 600)])
def test_a_long_model_warning_wraps_inside_the_panel(
    qtbot: Any, make_window: Any, tmp_path: Path, size: tuple[int, int]
) -> None:
    window = make_window()
    window.resize(*size)
    panel = window.panel
    cfg = _first_run().replace("data", source=f"csv:{_penguins_csv(tmp_path / 'penguins.csv')}", target="species")
    panel.show_run_config(cfg, "a failed run")  # a run's settings are shown as they ran: the CNN stays
    label = panel.model.label_model_params
    qtbot.waitUntil(lambda: label.text().startswith('⚠ model: model.kind = "cnn" needs image-shaped'), timeout=30_000)
    _settled(qtbot, panel)
    assert panel.config().model.kind == "cnn"
    assert _clipped(window) == []
    assert label.height() >= 2 * label.fontMetrics().height()  # wrapped onto lines of its own


# -- 4: a missing target ---------------------------------------------------------------------------
def test_a_missing_target_is_named_with_the_tables_columns_and_one_proposed(
    qtbot: Any, make_window: Any, tmp_path: Path
) -> None:
    window = make_window()
    window.resize(900, 600)
    panel = window.panel
    penguins = _penguins_csv(tmp_path / "penguins.csv")
    panel.set_config(Config().replace("data", source=f"csv:{penguins}", target="penguin_kind"))
    note = panel.data.label_target_note
    qtbot.waitUntil(lambda: panel.label_target_task.text() == "classification: 3 classes", timeout=30_000)
    assert panel.combo_target.currentText() == "species" and panel.config().data.target == "species"
    assert note.isVisible() and note.text() == (
        "⚠ target column 'penguin_kind' is not in penguins.csv (its columns: "
        + ", ".join(PENGUIN_COLUMNS)
        + "); 'species' is proposed: pick another above if it is not the column to predict"
    )
    assert window.statusBar().currentMessage() == "Target set to 'species': penguins.csv has no column 'penguin_kind'"
    _settled(qtbot, panel)
    assert _clipped(window) == []

    panel.add_source(f"csv:{_diamonds_csv(tmp_path / 'diamonds.csv')}")  # another table: its own target
    qtbot.waitUntil(lambda: panel.label_target_task.text().startswith("regression"), timeout=30_000)
    assert panel.combo_target.currentText() == "price"
    # the table before's target was proposed, not named for this one: a proposal, no warning about it
    assert (
        note.isVisible()
        and note.text() == "'price' is proposed as the column to predict: pick another above if it is not"
    )
    assert window.statusBar().currentMessage().endswith("Target set to 'price', proposed for diamonds.csv")
    headers = [
        panel.data.table_preview.horizontalHeaderItem(c).text() for c in range(panel.data.table_preview.columnCount())
    ]
    assert headers[-1] == "price"  # the preview names the target column as the table does
    _settled(qtbot, panel)

    panel.combo_target.setCurrentText("cut")  # the user's pick: nothing left to say
    qtbot.waitUntil(lambda: panel.label_target_task.text() == "classification: 4 classes", timeout=30_000)
    assert not note.isVisible()
    _settled(qtbot, panel)


# -- 6: one parameter count ------------------------------------------------------------------------
@pytest.mark.parametrize("table", ["penguins", "diamonds"])
def test_the_parameter_count_is_the_runs(qtbot: Any, make_window: Any, tmp_path: Path, table: str) -> None:
    from core.data import load_data
    from core.training.models import build_model, count_parameters

    path = (_penguins_csv if table == "penguins" else _diamonds_csv)(tmp_path / f"{table}.csv")
    cfg = Config().replace("data", source=f"csv:{path}", target="species" if table == "penguins" else "price")
    info = load_data(cfg.data, seed=cfg.train.seed, share=False, task=cfg.train.task).info  # as the run loads it
    assert info.categories  # category features: their embeddings are parameters too
    run = count_parameters(
        build_model(cfg.model, info.input_shape, info.num_classes, info.image_shape, info.categories)
    )
    window = make_window()
    window.panel.set_config(cfg)
    qtbot.waitUntil(lambda: window.panel.model.label_model_params.text().endswith(" parameters"), timeout=30_000)
    _settled(qtbot, window.panel)
    assert window.panel.model.label_model_params.text() == f"{run:,} parameters"
