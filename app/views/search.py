"""The Search tab: every trial of a hyperparameter search live, pruned ones marked.

A table (trial, state, worker, epochs, metric, settings), a parallel-coordinates
plot of the settings against the metric (complete trials; the best drawn
thick), and the keys' importance once the search ends.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core.services.runs.files import EVAL, TRIAL

FIXED = ["trial", "state", "worker", "epochs", "value"]
STATE_COLOURS = {"pruned": "#b0b0b0", "failed": "#d9534f", "stopped": "#d9534f", "running": "#5b9bd5"}


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return "" if value is None else str(value)


class SearchView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, objectName="view_search")
        self.trials: dict[int, dict[str, Any]] = {}
        self.keys: list[str] = []
        layout = QVBoxLayout(self)
        self.label_search_best = QLabel(
            'No search yet: choose strategy "search" and give the config a [search] table.',
            objectName="label_search_best",
        )
        self.label_search_best.setWordWrap(True)
        layout.addWidget(self.label_search_best)
        split = QSplitter(Qt.Orientation.Vertical)
        self.table_trials = QTableWidget(objectName="table_trials")
        self.table_trials.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table_trials.verticalHeader().hide()
        self.table_trials.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table_trials.setSortingEnabled(False)
        split.addWidget(self.table_trials)
        self.plot_search_parallel = pg.PlotWidget(objectName="plot_search_parallel")
        self.plot_search_parallel.showGrid(x=True, y=False, alpha=0.2)
        self.plot_search_parallel.setLabel("left", "scaled to each key's range")
        split.addWidget(self.plot_search_parallel)
        layout.addWidget(split, 1)
        self.label_importance = QLabel("", objectName="label_importance")
        self.label_importance.setWordWrap(True)
        layout.addWidget(self.label_importance)

    def reset(self) -> None:
        self.trials.clear()
        self.keys = []
        self.table_trials.clear()
        self.table_trials.setRowCount(0)
        self.plot_search_parallel.clear()
        self.label_importance.setText("")

    def add_records(self, records: list[dict[str, Any]]) -> None:
        changed = False
        for rec in records:
            kind = rec.get("kind")
            if kind == TRIAL:
                trial = self.trials.setdefault(rec["trial"], {"trial": rec["trial"], "params": {}})
                trial.update({k: v for k, v in rec.items() if k not in ("kind", "t", "trial")})
                if rec.get("params"):
                    self.keys += [k for k in rec["params"] if k not in self.keys]
                changed = True
            elif kind == EVAL and "trial" in rec and rec["trial"] in self.trials:
                self.trials[rec["trial"]]["epochs"] = rec["epoch"]
                changed = True
        if changed:
            self._refresh()

    def show_summary(self, summary: dict[str, Any] | None) -> None:
        """A finished search: its trials (for a past run) and the keys' importance."""
        if not summary or "trials" not in summary:
            return
        for t in summary["trials"]:
            row = self.trials.setdefault(t["number"], {"trial": t["number"]})
            row.update(
                state=t["state"],
                worker=t.get("worker"),
                epochs=t.get("epochs"),
                value=t.get("value"),
                params=t.get("params") or {},
            )
            self.keys += [k for k in row["params"] if k not in self.keys]
        importance = summary.get("importance") or {}
        if importance:
            self.label_importance.setText("Importance: " + ", ".join(f"{k} {v:.0%}" for k, v in importance.items()))
        self._refresh()

    def _refresh(self) -> None:
        columns = FIXED + self.keys
        rows = [self.trials[n] for n in sorted(self.trials)]
        table = self.table_trials
        table.setColumnCount(len(columns))
        table.setHorizontalHeaderLabels(columns)
        table.setRowCount(len(rows))
        for r, trial in enumerate(rows):
            values = [
                trial["trial"],
                trial.get("state", ""),
                trial.get("worker"),
                trial.get("epochs"),
                trial.get("value"),
            ] + [trial.get("params", {}).get(k) for k in self.keys]
            colour = STATE_COLOURS.get(str(trial.get("state")))
            for c, value in enumerate(values):
                item = QTableWidgetItem(_text(value))
                if colour:
                    item.setForeground(QBrush(QColor(colour)))
                if trial.get("state") == "pruned":
                    item.setToolTip(f"pruned after epoch {trial.get('epoch') or trial.get('epochs')}")
                table.setItem(r, c, item)
        complete = [t for t in rows if t.get("state") == "complete" and isinstance(t.get("value"), (int, float))]
        done = [t for t in rows if t.get("state") in ("complete", "pruned", "failed", "stopped")]
        pruned = sum(t.get("state") == "pruned" for t in rows)
        if complete:
            best = max(complete, key=lambda t: t["value"])
            self.label_search_best.setText(
                f"{len(done)} trial(s) done, {pruned} pruned; best: trial {best['trial']}, {best['value']:.4f}"
            )
        else:
            self.label_search_best.setText(f"{len(rows)} trial(s), {pruned} pruned")
        self._draw_parallel(complete)

    def _draw_parallel(self, complete: list[dict[str, Any]]) -> None:
        """One line per complete trial through every key's axis (scaled 0..1; log for wide ranges), then the metric."""
        plot = self.plot_search_parallel
        plot.clear()
        axes = self.keys + ["value"]
        if not complete:
            return
        columns = []
        for key in axes:
            raw = [t["value"] if key == "value" else t.get("params", {}).get(key) for t in complete]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
                vals = np.asarray(raw, dtype=float)
                if vals.min() > 0 and vals.max() / vals.min() > 100:
                    vals = np.log10(vals)
            else:  # categories: their order of appearance
                names = list(dict.fromkeys(_text(v) for v in raw))
                vals = np.asarray([names.index(_text(v)) for v in raw], dtype=float)
            lo, hi = float(vals.min()), float(vals.max())
            columns.append((vals - lo) / (hi - lo) if hi > lo else np.full_like(vals, 0.5))
        data = np.stack(columns, axis=1)
        x = np.arange(len(axes), dtype=float)
        best = int(np.argmax([t["value"] for t in complete]))
        for i, row in enumerate(data):
            width = 3 if i == best else 1
            plot.plot(x, row, pen=pg.mkPen(pg.intColor(i, hues=max(6, len(complete))), width=width))
        plot.getAxis("bottom").setTicks([[(float(i), name) for i, name in enumerate(axes)]])
        plot.setXRange(-0.2, len(axes) - 0.8)
        if any(math.isnan(v) for v in data.ravel()):
            return
