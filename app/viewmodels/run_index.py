"""Every run of a runs directory as a row: what ran, how it ended, the user's notes (no Qt: testable).

``RunIndex.scan()`` reads each run's summary, config and notes through its
:class:`~core.services.runs.files.RunDir` and, for a live run's figure (the metric that selects its model:
``core.metric_names.run_metric``) and its count of epochs or trials done, folds its ``metrics.jsonl`` into a
:class:`~core.services.runs.reading.RunStats` incrementally (a live run's log is read
from where the last scan stopped). An ended run's count is its summary's.
It is called off the GUI thread. Notes, tags and the display name live in
the run directory (``notes.json``), so they travel with the run. Where a run is mirrored to MLflow (its
``mlflow.json``, read through :mod:`core.services.tracking`) becomes its :class:`MirrorCell`.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.config import to_dict
from core.metric_names import run_figures, run_metric
from core.services.runs.files import (
    MetricsTail,
    RunDir,
    is_live,
    list_runs,
    parse_tags,
    read_notes,
    trash_run,
    write_notes,
)
from core.services.runs.past import read_config
from core.services.runs.reading import RunCount, RunStats, count
from core.services.runs.shape import shape_of
from core.services.tracking import Mirrored, read_mirrors

__all__ = [
    "MirrorCell",
    "RunIndex",
    "RunRow",
    "mirror_cell",
    "parse_tags",
    "read_notes",
    "started_at",
    "trash_run",
    "write_notes",
]
_STAMP = re.compile(r"^(\d{8})-(\d{6})")


@dataclass(frozen=True)
class MirrorCell:
    """What the Runs table says of a run's MLflow mirror: its MLflow run (a link to its page on a server), that
    it is not complete there ("pending"), or nothing (not mirrored)."""

    text: str = ""
    link: str = ""  # the run's page in the MLflow UI (an http(s) server); "" for a local store or none
    tip: str = ""
    pending: bool = False  # the mirror stopped short of the run's end: `traindesk runs --to-mlflow` sends the rest


def mirror_cell(run_dir: Path, mirrors: dict[str, Mirrored], live: bool, prefer: str = "") -> MirrorCell:
    """The cell of a run mirrored as ``mirrors`` (its mlflow.json) says; ``prefer``: the URI to show first (the
    window's setting) when the run went to several."""
    if not mirrors:
        return MirrorCell()
    uri = prefer if prefer in mirrors else next(iter(mirrors))
    entry = mirrors[uri]
    others = [u for u in mirrors if u != uri]
    also = f"\nalso mirrored to {', '.join(others)}" if others else ""
    if not entry.ended and not live:
        return MirrorCell(
            "pending",
            tip=f"Not all of this run reached {uri}: `traindesk runs --to-mlflow {shlex.quote(uri)} "
            f"{shlex.quote(str(run_dir))}` sends the rest "
            "(or Mirror to MLflow in this table's menu)" + also,
            pending=True,
        )
    if not entry.run_id:  # live, and the server has not answered yet
        return MirrorCell("sending…", tip=f"Its process mirrors this run to {uri} as it trains" + also)
    doing = "mirrored as it trains" if live and not entry.ended else entry.ended  # FINISHED, FAILED, KILLED
    short = entry.run_id[:8]
    if entry.link:
        return MirrorCell(
            f"{short} ↗", entry.link, f"Open its MLflow page: {entry.link}\nMLflow run {entry.run_id}, {doing}" + also
        )
    return MirrorCell(short, tip=f"{uri}\nMLflow run {entry.run_id}, {doing}" + also)


@dataclass
class RunRow:
    path: Path
    name: str  # the display name (notes.json) or the folder's name
    started: float  # unix time
    status: str  # finished | stopped | failed | running | incomplete | imported
    dataset: str = ""
    model: str = ""
    strategy: str = ""
    workers: int = 0
    epochs_done: int = 0  # what ``count`` says is done (epochs or trials), for sorting
    epochs: int = 0
    count: RunCount = field(default_factory=lambda: RunCount(0))  # how far it got, as every view says it
    metric: str = "val_accuracy"  # the run's figure: the metric that chose the model it hands on
    best_figure: float = math.nan  # that model's value of it
    final_figure: float = math.nan  # its value at the last evaluation
    samples_per_s: float = math.nan
    wall_s: float = math.nan
    notes: str = ""
    tags: list[str] = field(default_factory=list)
    parent: str = ""  # the parent run's folder name, for a fork
    imported_from: str = ""  # an imported run's folder of TensorBoard logs (it has no config, no checkpoint)
    races: list[str] = field(default_factory=list)  # the races it went through, a line each (summary.json)
    config: dict[str, Any] = field(default_factory=dict)
    mirror: MirrorCell = field(default_factory=MirrorCell)  # where it is mirrored to MLflow

    @property
    def folder(self) -> str:
        return self.path.name


def race_lines(summary: dict[str, Any]) -> list[str]:
    """A line per race in summary.json: its marker and each variant's figures at the rungs ("lr 0.15:
    0.9611 0.9722", "as is: 0.9694, rung 2: 0.9694 < 0.9722")."""
    lines = []
    for race in summary.get("races") or []:
        if not isinstance(race, dict):
            continue
        lines.append(str(race.get("marker") or "race"))
        for v in race.get("variants") or []:
            figures = " ".join(f"{f:.4f}" for f in v.get("figures") or [] if isinstance(f, (int, float)))
            lines.append(f"  {v.get('label', '?')}: {figures}" + (f" ({v['out']})" if v.get("out") else ""))
    return lines


def started_at(run_dir: Path) -> float:
    m = _STAMP.match(run_dir.name)
    if m:
        try:
            return time.mktime(time.strptime(m.group(1) + m.group(2), "%Y%m%d%H%M%S"))
        except ValueError:
            pass
    try:
        return RunDir(run_dir).config.stat().st_mtime
    except OSError:
        return 0.0


class _RecordsTail:
    """One run's records folded into its RunStats, read incrementally."""

    def __init__(self, run: RunDir) -> None:
        self.tail = MetricsTail(run.metrics)
        self.stats = RunStats()

    def update(self) -> RunStats:
        self.stats.add(self.tail.read())
        return self.stats


class RunIndex:
    """Rows for the runs table; keeps per-run readers between scans so live logs are read incrementally."""

    def __init__(self, runs_dir: Path | str) -> None:
        self.runs_dir = Path(runs_dir)
        self._tails: dict[Path, _RecordsTail] = {}

    def scan(self, active: set[Path] | None = None, prefer: str = "") -> list[RunRow]:
        """Every run directory, newest first. ``active``: runs known to be live (else asked of the lock);
        ``prefer``: the MLflow tracking URI whose mirror a run's cell shows when it has several."""
        rows = []
        seen = set()
        for run in list_runs(self.runs_dir):
            d = run.path
            seen.add(d)
            live = (d in active) if active is not None else is_live(d)
            rows.append(self.row(d, live or is_live(d), prefer))
        for gone in set(self._tails) - seen:
            del self._tails[gone]
        return rows

    def row(self, d: Path, live: bool = False, prefer: str = "") -> RunRow:
        run = RunDir(d)
        summary = run.read_summary() or {}
        notes = read_notes(d)
        cfg = read_config(run)
        cfg_dict = to_dict(cfg) if cfg is not None else {}
        status = "running" if live else (summary.get("status") or "incomplete")
        row = RunRow(
            path=d,
            name=str(notes.get("name") or d.name),
            started=started_at(d),
            status=status,
            notes=str(notes.get("notes") or ""),
            tags=list(notes.get("tags") or []),
            config=cfg_dict,
            mirror=mirror_cell(d, read_mirrors(d), live, prefer),
        )
        if cfg is not None:
            row.dataset = str(summary.get("dataset") or cfg.data.source.split("/")[-1])
            row.model = cfg.model.kind.split(":")[0] if cfg.model.kind.startswith("custom:") else cfg.model.kind
            row.strategy = cfg.parallel.strategy
            row.workers = int(summary.get("workers") or cfg.parallel.workers)
            row.epochs = cfg.train.epochs
        for key in ("samples_per_s", "wall_s"):
            if isinstance(summary.get(key), (int, float)):
                setattr(row, key, float(summary[key]))
        parent = summary.get("parent")
        if isinstance(parent, dict):
            row.parent = str(parent.get("name") or "")
        row.races = race_lines(summary)
        source = run.imported()
        if source is not None:  # another tool's logs: read-only, no config to say what ran
            row.status = row.strategy = "imported"
            row.workers = 1
            row.imported_from = str(source.get("path") or "")
        tail = self._tails.get(d)
        if tail is None:
            tail = self._tails[d] = _RecordsTail(run)
        stats = tail.update()
        if (live or not summary) and cfg is not None:  # no summary (yet): the records say how far it got
            row.count = count(stats, shape_of(cfg))
        else:
            row.count = RunCount.of_summary(summary, row.epochs)
        row.epochs_done = row.count.done
        row.metric = run_metric({"task": stats.task, **summary} if stats.last_eval else summary, cfg)
        kept, last = run_figures(summary, row.metric)
        if live or last is None:  # the records say where a live run is
            best_worker = summary.get("best_worker")
            last = stats.last_value(row.metric, best_worker if isinstance(best_worker, int) else None)
            if last is None:
                last = stats.last_value(row.metric)
        # the model the run hands on (best.pt, chosen by its select_by), measured on those weights
        best = kept if kept is not None else stats.best_value(row.metric)
        row.best_figure = math.nan if best is None else best
        row.final_figure = math.nan if last is None else last
        return row
