"""The Race dialog: what the variants change (rows of a key and its values), the rungs, how many are kept, and
whether the winner goes on as a fork; Race plans it with ``core.services.race.plan.plan_race`` and stays open on
its one-line error, so the dialog says exactly what the command line's ``traindesk race`` would.

A row's values are ``0.3x,1x,3x`` (multiples of the run's own) or plain values (``0.01,0.1``); the keys are
those a fork may change (``optim.*``, ``train.*``) but the epochs and early stop the race sets itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.panel.fields import form_of, value_of
from core.config import FIELDS, FORKABLE_SECTIONS, Config, ConfigError
from core.services.race.plan import RACE_SETS, RacePlan, plan_race, plan_variants

MAX_ROWS = 4  # four settings of two values each are sixteen variants already
EXAMPLES = {"float": "0.3x,1x,3x", "int": "0.5x,1x,2x", "train.seed": "0,1,2,3"}  # by key, else by type


def race_keys() -> list[str]:
    """The keys a race may vary, the learning rate first."""
    keys = [k for k in FIELDS if k.split(".")[0] in FORKABLE_SECTIONS and k not in RACE_SETS]
    return sorted(keys, key=lambda k: (k != "optim.lr", keys.index(k)))


def parse_rungs(text: str) -> list[int] | None:
    """``1,2,4`` to epoch counts, "" to None (automatic); ConfigError (one line) otherwise."""
    if not text.strip():
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(f"race: rungs must be epoch counts like 1,2,4, got {text.strip()!r}") from None


class VaryRow(QWidget):
    """One setting the variants change: its key and values, what the run has now, a button to drop it."""

    def __init__(self, index: int, cfg: Config, key: str, values: str = "") -> None:
        super().__init__()
        self.cfg = cfg
        self.combo_key = QComboBox(objectName=f"combo_race_key_{index}")
        for k in race_keys():
            self.combo_key.addItem(k, k)
        self.edit_values = QLineEdit(values, objectName=f"edit_race_values_{index}")
        self.label_now = QLabel(objectName=f"label_race_now_{index}")
        self.button_remove = QToolButton(objectName=f"button_race_remove_{index}")
        self.button_remove.setText("−")
        self.button_remove.setToolTip("Drop this setting")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.combo_key)
        layout.addWidget(QLabel("="))
        layout.addWidget(self.edit_values, 1)
        layout.addWidget(self.label_now)
        layout.addWidget(self.button_remove)
        self.combo_key.currentIndexChanged.connect(self._on_key)
        self.combo_key.setCurrentIndex(max(0, self.combo_key.findData(key)))
        self._on_key()

    @property
    def key(self) -> str:
        return str(self.combo_key.currentData())

    def spec(self) -> str:
        """``KEY=V1,V2,...`` as ``--vary`` takes it ("" for a row left empty)."""
        values = self.edit_values.text().strip()
        return f"{self.key}={values}" if values else ""

    def _on_key(self, *_args: Any) -> None:
        key = self.key
        field = FIELDS[key]
        now = value_of(self.cfg, key)
        self.label_now.setText(f"now {now:g}" if isinstance(now, float) else f"now {now}")
        example = (
            EXAMPLES.get(key)
            or EXAMPLES.get(field.type)
            or ",".join(str(c) for c in (field.choices or ())[:3])
            or "V1,V2"
        )
        self.edit_values.setPlaceholderText(f"e.g. {example}")
        self.edit_values.setToolTip(
            (field.help + "\n" if field.help else "") + "Values, or multiples of the run's own: 0.3x,1x,3x"
        )


@dataclass(frozen=True)
class RaceRequest:
    """What the dialog asks for, as ``traindesk race`` takes it: ``--vary`` specs, rungs (None: automatic), keep."""

    vary: list[str]
    rungs: list[int] | None
    keep: int


class RaceDialog(QDialog):
    """Plan a race of ``run_dir`` (a run with a checkpoint, ``cfg`` its settings); ``plan`` once accepted.

    ``stops_run``: the run is the window's, live (paused or running): its stop writes the checkpoint the race
    starts from, so Race checks what the dialog asks against ``cfg`` alone (``request``) and the window plans
    the race once the run has stopped."""

    def __init__(self, run_dir: Path, cfg: Config, parent: QWidget | None = None, stops_run: bool = False) -> None:
        super().__init__(parent)
        self.setObjectName("dialog_race")
        self.setWindowTitle(f"Race {run_dir.name}")
        self.run_dir = run_dir
        self.cfg = cfg
        self.stops_run = stops_run
        self.plan: RacePlan | None = None
        self.request: RaceRequest | None = None  # what Race accepted (a plan's input, checked)
        self.rows: list[VaryRow] = []
        layout = QVBoxLayout(self)
        intro = QLabel(
            f"Clones of the last checkpoint of <b>{run_dir.name}</b> train side by side, each with the settings "
            "below changed (every combination of the values). At each rung the worse half stops; the best goes "
            "on as the run itself, or as a fork."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.label_note = QLabel(
            "Race stops the run first: its checkpoint where it is now is where the variants start.",
            objectName="label_race_note",
        )
        self.label_note.setWordWrap(True)
        self.label_note.setVisible(stops_run)
        layout.addWidget(self.label_note)
        self.rows_box = QVBoxLayout()
        layout.addLayout(self.rows_box)
        self.button_add = QPushButton("Add a setting", objectName="button_race_add")
        self.button_add.clicked.connect(lambda: self.add_row())
        add_line = QHBoxLayout()
        add_line.addWidget(self.button_add)
        add_line.addStretch(1)
        layout.addLayout(add_line)
        box = QWidget()
        form = form_of(box)
        self.edit_rungs = QLineEdit(objectName="edit_race_rungs")
        self.edit_rungs.setPlaceholderText("automatic: 1, 2, 4, … epochs")
        self.edit_rungs.setToolTip("Epochs after the start at which the worse half stops, e.g. 1,2,4")
        form.addRow("Rungs", self.edit_rungs)
        self.spin_keep = QSpinBox(objectName="spin_race_keep")
        self.spin_keep.setRange(1, 64)
        self.spin_keep.setToolTip("Variants left at the end; the best of them goes on")
        form.addRow("Keep", self.spin_keep)
        layout.addWidget(box)
        self.check_as_fork = QCheckBox("The winner goes on as a fork (the run stays as it is)")
        self.check_as_fork.setObjectName("check_race_as_fork")
        layout.addWidget(self.check_as_fork)
        self.label_error = QLabel(objectName="label_race_error")
        self.label_error.setWordWrap(True)
        self.label_error.hide()
        layout.addWidget(self.label_error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Race")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.add_row("optim.lr", "0.3x,1x,3x")
        self.setMinimumWidth(520)

    def add_row(self, key: str = "optim.lr", values: str = "") -> VaryRow:
        """Another setting to vary (the first key no row varies yet, unless ``key`` is given)."""
        used = {r.key for r in self.rows}
        if key in used:
            key = next((k for k in race_keys() if k not in used), key)
        row = VaryRow(len(self.rows), self.cfg, key, values)
        row.button_remove.clicked.connect(lambda: self._remove(row))
        self.rows.append(row)
        self.rows_box.addWidget(row)
        self._rows_changed()
        return row

    def set_vary(self, specs: list[str]) -> None:
        """Rows from ``KEY=V1,V2,...`` lines, as ``--vary`` takes them (scripts and tests)."""
        for row in list(self.rows):
            self._remove(row)
        for spec in specs:
            key, _, values = spec.partition("=")
            self.add_row(key.strip(), values.strip())

    def _remove(self, row: VaryRow) -> None:
        self.rows.remove(row)
        row.setParent(None)
        row.deleteLater()
        self._rows_changed()

    def _rows_changed(self) -> None:
        self.button_add.setEnabled(len(self.rows) < MAX_ROWS)
        for row in self.rows:
            row.button_remove.setEnabled(len(self.rows) > 1)

    @property
    def as_fork(self) -> bool:
        return self.check_as_fork.isChecked()

    def check(self) -> bool:
        """Whether the dialog asks for a race: planned now from the run's checkpoint (``plan``), or, for a run
        that Race stops first, checked against its settings (planned once its stop wrote its checkpoint); else
        the one-line reason is shown under the rows."""
        try:
            specs = [s for s in (r.spec() for r in self.rows) if s]
            request = RaceRequest(specs, parse_rungs(self.edit_rungs.text()), self.spin_keep.value())
            if self.stops_run:
                plan_variants(self.cfg, request.vary, request.rungs, request.keep)
            else:
                self.plan = plan_race(self.run_dir, request.vary, request.rungs, request.keep)
        except ConfigError as exc:
            self.show_error(str(exc))
            return False
        self.show_error("")
        self.request = request
        return True

    def make_plan(self) -> RacePlan | None:
        """The race as the dialog says it, or None with the one-line reason shown under the rows."""
        return self.plan if self.check() else None

    def show_error(self, text: str) -> None:
        self.label_error.setText(text)
        self.label_error.setVisible(bool(text))

    def error(self) -> str:
        return self.label_error.text()

    def accept(self) -> None:
        """Race: only a race that plans closes the dialog; a bad value keeps it open, its line shown."""
        if self.check():
            super().accept()
