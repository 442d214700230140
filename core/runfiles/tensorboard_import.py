"""Another tool's TensorBoard logs as a read-only run: a Lightning ``lightning_logs/version_N`` and the like.

The logs are read with TensorBoard's own reader (``plugin_event_accumulator``, which takes old-style and tensor
scalars alike), turned into the records and summary of a run directory, and written into a new folder of the
runs directory named as the others are (``<YYYYmmdd-HHMMSS>-<name>``, stamped with the logs' first time). What
each tag becomes (a tag's name is compared in lower case, ``/``, ``-``, ``.`` and spaces read as ``_``):

- the training loss (``train_loss_step``, else ``train_loss``, ``training_loss``, ``loss_train``, ``loss``):
  ``step`` records, worker 0, at the logged global step;
- validation figures (``val_loss``, ``val_acc``/``val_accuracy``, ``val_rmse``, ...; also ``valid_`` and
  ``validation_``, a ``_val`` ending and Lightning's ``_epoch`` forms): ``eval`` records, one per step at which
  any was logged;
- ``epoch`` (Lightning's, counted from 0): each record's epoch, counted from 1 as TrainDesk counts (without
  it, each evaluation closes an epoch);
- a learning rate (``lr``, LearningRateMonitor's ``lr-SGD``, ``learning_rate``): the step records' ``lr``;
- ``train_loss_epoch``: the summary's final training loss; the hparams plugin's values (none in a plain
  ``SummaryWriter``'s log): the summary's.

Every other tag (a tag whose every value is NaN or infinite among them, and every image, histogram or text) is
named in the summary (``imported.not_drawn``) and in the run's first log line. The layout is docs/reference/run-directory.md's "Imported runs".
"""

from __future__ import annotations

import bisect
import json
import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import RunError
from core.metric_names import METRICS
from core.runfiles.layout import RunDir, list_runs
from core.runfiles.records import Record, imported_eval_record, imported_step_record, log_record
from core.runfiles.shape import RunShape
from core.runfiles.writing import atomic_write_text, make_run_dir, write_summary

EVENT_FILES = "events.out.tfevents.*"
IMPORTED = "imported"  # summary.json's strategy (and shape's) for a run no TrainDesk strategy trained
TRAIN_LOSS = ("train_loss_step", "train_loss", "training_loss_step", "training_loss", "loss_train", "loss")
TRAIN_LOSS_EPOCH = ("train_loss_epoch", "training_loss_epoch")
VALIDATION = ("val", "valid", "validation")
FIGURES = {  # a validation tag's name, once its val_ / _val is taken off -> the metric it is
    "loss": "val_loss",
    "acc": "val_accuracy",
    "accuracy": "val_accuracy",
    "balanced_acc": "val_balanced_accuracy",
    "balanced_accuracy": "val_balanced_accuracy",
    "macro_f1": "val_macro_f1",
    "f1_macro": "val_macro_f1",
    **{m.removeprefix("val_"): m for m in METRICS},
}


@dataclass(frozen=True)
class Point:
    step: int
    t: float  # the event's wall time (unix seconds)
    value: float


@dataclass
class TensorBoardLog:
    """One folder of event files, as TensorBoard reads it."""

    path: Path
    scalars: dict[str, list[Point]] = field(default_factory=dict)  # tag -> its finite points, by step
    others: dict[str, list[str]] = field(default_factory=dict)  # plugin (images, histograms, text) -> tags
    hparams: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImportedRun:
    """What became of one folder of event files."""

    source: Path
    run_dir: Path | None  # the run it is (None: skipped)
    already: bool = False  # it was imported before, as run_dir
    skipped: str = ""  # why it was not imported
    not_drawn: tuple[str, ...] = ()  # its tags that no curve shows


def event_dirs(source: Path) -> list[Path]:
    """The folders under ``source`` (itself included) that hold event files: one run each, as TensorBoard sees."""
    found = {p.parent for p in source.rglob(EVENT_FILES) if p.is_file()}
    return sorted(found)


def read_log(path: Path) -> TensorBoardLog:
    """Every scalar of a folder's event files (all points: no sampling), the other tags' names, the hparams."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(path), size_guidance={"tensors": 1}, tensor_size_guidance={"scalars": 0})
    acc.Reload()
    log = TensorBoardLog(path)
    for tag in acc.Tags().get("tensors", []):
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name or "tensors"
        if plugin == "scalars":
            points = [Point(int(e.step), float(e.wall_time), _value(e.tensor_proto)) for e in acc.Tensors(tag)]
            log.scalars[tag] = sorted((p for p in points if math.isfinite(p.value)), key=lambda p: p.step)
        elif plugin != "hparams":
            log.others.setdefault(plugin, []).append(tag)
    try:
        hparams = acc.PluginTagToContent("hparams")
    except KeyError:  # a plain SummaryWriter's log: it wrote no hparams, and the reader raises for a plugin unseen
        hparams = {}
    for content in hparams.values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            log.hparams.update({k: _plain(v) for k, v in data.session_start_info.hparams.items()})
    return log


def _value(proto: Any) -> float:
    """A scalar event's value; a float32's as it prints (0.9748, not 0.9747767448425293)."""
    import numpy as np
    from tensorboard.util import tensor_util

    array = tensor_util.make_ndarray(proto)
    value = array.reshape(-1)[0]
    return float(str(value)) if array.dtype == np.float32 else float(value)


def _plain(value: Any) -> Any:
    """An hparam's value (a protobuf ``Value``: a number, a string or a bool) as Python's; anything else as text."""
    kind = value.WhichOneof("kind")
    if kind in ("number_value", "string_value", "bool_value"):
        return getattr(value, kind)
    return None if kind in (None, "null_value") else str(value)


def _key(tag: str) -> str:
    return re.sub(r"[/\-. ]+", "_", tag.strip().lower()).strip("_")


def _validation_metric(key: str) -> str | None:
    """The metric a validation tag's key names (``val_acc``, ``val_loss_epoch``, ``loss_val``), else None."""
    if key.endswith("_step"):
        return None  # Lightning's per-batch validation values: the _epoch form is the evaluation
    key = key.removesuffix("_epoch")
    words = key.split("_")
    for head in VALIDATION:
        if words[0] == head and len(words) > 1:
            return FIGURES.get("_".join(words[1:]))
        if words[-1] == head and len(words) > 1:
            return FIGURES.get("_".join(words[:-1]))
    return None


@dataclass
class TagPlan:
    """Which tag is which: the training loss, its epoch means, the epoch, the learning rate, the figures."""

    train: str | None = None
    train_epoch: str | None = None
    epoch: str | None = None
    lr: str | None = None
    figures: dict[str, str] = field(default_factory=dict)  # metric -> tag

    @classmethod
    def of(cls, tags: list[str]) -> TagPlan:
        plan = cls()
        keys = {tag: _key(tag) for tag in sorted(tags)}
        by_key: dict[str, str] = {}
        for tag, key in keys.items():
            by_key.setdefault(key, tag)
        plan.train = next((by_key[k] for k in TRAIN_LOSS if k in by_key), None)
        plan.train_epoch = next((by_key[k] for k in TRAIN_LOSS_EPOCH if k in by_key), None)
        plan.epoch = by_key.get("epoch")
        plan.lr = next((t for t, k in keys.items() if k in ("lr", "learning_rate") or k.startswith("lr_")), None)
        for tag, key in keys.items():
            metric = _validation_metric(key)
            if metric is not None and metric not in plan.figures:
                plan.figures[metric] = tag
        return plan

    def uses(self) -> dict[str, str]:
        """Each tag used -> what it became."""
        out = {tag: f"eval.{metric}" for metric, tag in self.figures.items()}
        for tag, what in ((self.train, "step.loss"), (self.train_epoch, "final.train_loss")):
            if tag is not None:
                out[tag] = what
        for tag, what in ((self.epoch, "epoch"), (self.lr, "step.lr")):
            if tag is not None:
                out[tag] = what
        return dict(sorted(out.items()))


class _Series:
    """A scalar's value at any step: its last point at or before it (its first before it began)."""

    def __init__(self, points: list[Point]) -> None:
        self.steps = [p.step for p in points]
        self.values = [p.value for p in points]

    def at(self, step: int) -> float | None:
        if not self.steps:
            return None
        return self.values[max(0, bisect.bisect_right(self.steps, step) - 1)]


def convert(log: TensorBoardLog, label: str) -> tuple[list[Record], dict[str, Any]]:
    """The records and summary of ``log`` as a run (RunError: it holds no training loss and no figure)."""
    plan = TagPlan.of([tag for tag, points in log.scalars.items() if points])  # a tag all NaN is not drawn
    if plan.train is None and not plan.figures:
        empty = sorted(tag for tag, points in log.scalars.items() if not points)
        nan = f"; every value of {', '.join(empty)} is NaN or infinite" if empty else ""
        raise RunError(f"no training loss or validation scalars among its tags ({', '.join(sorted(log.scalars))}){nan}")
    epochs = _Series(log.scalars[plan.epoch]) if plan.epoch else None
    eval_steps = sorted({p.step for tag in plan.figures.values() for p in log.scalars[tag]})

    def epoch_at(step: int) -> int:
        value = epochs.at(step) if epochs is not None else None
        if value is not None:
            return int(round(value)) + 1
        return 1 + bisect.bisect_left(eval_steps, step)  # each evaluation closes an epoch

    lr = _Series(log.scalars[plan.lr]) if plan.lr else None
    steps = [
        imported_step_record(epoch_at(p.step), p.step, p.value, p.t, lr.at(p.step) if lr is not None else None)
        for p in log.scalars.get(plan.train or "", [])
    ]
    # each figure's last point at each step, in one pass over its points: the merge is linear in the points
    by_step: dict[int, dict[str, Point]] = {step: {} for step in eval_steps}
    for metric, tag in plan.figures.items():
        for p in log.scalars[tag]:
            by_step[p.step][metric] = p
    evals = []
    for step in eval_steps:
        here = by_step[step]
        figures = {m: p.value for m, p in here.items()}
        evals.append(imported_eval_record(epoch_at(step), step, figures, max(p.t for p in here.values())))
    not_drawn = _not_drawn(log, plan)
    everything = [p for points in log.scalars.values() for p in points]
    t0 = min((p.t for p in everything), default=0.0)
    note = f"imported from the TensorBoard logs in {log.path}: " + ", ".join(
        f"{tag} as {what}" for tag, what in plan.uses().items()
    )
    if not_drawn:
        note += f"; not drawn: {', '.join(not_drawn)}"
    records = [log_record(None, "info", note, t=t0)]
    records += sorted(steps + evals, key=lambda r: (r["step"], r["kind"] == "eval", r["t"]))
    return records, _summary(log, plan, steps, evals, label, not_drawn)


def _not_drawn(log: TensorBoardLog, plan: TagPlan) -> list[str]:
    used = plan.uses()
    names = [tag for tag in sorted(log.scalars) if tag not in used]
    for plugin, tags in sorted(log.others.items()):
        names += [f"{tag} ({plugin})" for tag in sorted(tags)]
    return names


def _summary(
    log: TensorBoardLog, plan: TagPlan, steps: list[Record], evals: list[Record], label: str, not_drawn: list[str]
) -> dict[str, Any]:
    everything = [p for points in log.scalars.values() for p in points]
    t0, t1 = min(p.t for p in everything), max(p.t for p in everything)
    done = max((int(r["epoch"]) for r in evals or steps), default=0)
    final: dict[str, Any] = {"train_loss": None, "val_loss": None, "val_accuracy": None}
    if plan.train_epoch is not None and log.scalars[plan.train_epoch]:
        final["train_loss"] = log.scalars[plan.train_epoch][-1].value
    elif steps:  # the mean over the last epoch, as a run's summary has it
        last = [float(r["loss"]) for r in steps if r["epoch"] == steps[-1]["epoch"]]
        final["train_loss"] = sum(last) / len(last)
    for metric in plan.figures:
        final[metric] = next((r[metric] for r in reversed(evals) if metric in r), None)
    task = "regression" if "val_rmse" in plan.figures and "val_accuracy" not in plan.figures else "classification"
    shape = RunShape(
        strategy=IMPORTED,
        workers=1,
        models=1,
        labels=(log.path.name,),
        separate=False,
        sweep_lr=None,
        trials=None,
        epochs=done,
        task=task,
        figure="val_rmse" if task == "regression" else "val_accuracy",
    )
    return {
        "status": "finished",
        "strategy": IMPORTED,
        "workers": 1,
        "epochs_done": done,
        "progress": {"done": done, "of": done, "unit": "epochs", "slowest": False},
        "shape": shape.as_dict(),
        "steps": max((int(r["step"]) for r in steps + evals), default=0),
        "samples": None,  # the logs count steps, not samples
        "wall_s": round(t1 - t0, 4),
        "train_s": round(steps[-1]["t"] - steps[0]["t"], 4) if steps else 0.0,
        "samples_per_s": None,
        "final": final,
        "task": task,
        "error": None,
        "imported": {
            "from": "tensorboard",
            "path": str(log.path),
            "name": label,
            "tags": plan.uses(),
            "not_drawn": not_drawn,
            "hparams": log.hparams,
        },
    }


def imported_runs(runs_dir: Path | str) -> dict[str, Path]:
    """The runs of ``runs_dir`` imported from TensorBoard logs, by the folder of logs each came from."""
    found = {}
    for run in list_runs(runs_dir):
        source = run.imported()
        if source is not None and source.get("from") == "tensorboard" and source.get("path"):
            found[str(source["path"])] = run.path
    return found


def import_tensorboard(source: Path | str, runs_dir: Path | str) -> list[ImportedRun]:
    """Each folder of event files under ``source`` as a new run of ``runs_dir``, once: a folder imported before is
    answered with its run (``already``). RunError (one line): ``source`` holds no event files, or none that
    can be a run (no training loss and no figure, or a TrainDesk run's own ``tb/``)."""
    source = Path(source)
    if source.is_file() and source.match(EVENT_FILES):
        source = source.parent
    if not source.exists():
        raise RunError(f"runs: {source} does not exist (a folder of TensorBoard logs was expected)")
    if not source.is_dir():
        raise RunError(f"runs: {source} is not a folder of TensorBoard logs")
    folders = event_dirs(source)
    if not folders:
        raise RunError(f"runs: no TensorBoard event files ({EVENT_FILES}) in {source}")
    known = imported_runs(runs_dir)
    out = []
    for folder in folders:
        path = folder.resolve()
        if folder.name == "tb" and RunDir(folder.parent).config.is_file():
            out.append(ImportedRun(folder, None, skipped="a TrainDesk run's own TensorBoard files"))
        elif str(path) in known:
            out.append(ImportedRun(folder, known[str(path)], already=True))
        else:
            out.append(_import_one(folder, path, Path(runs_dir)))
    if all(r.run_dir is None for r in out):
        reasons = "; ".join(f"{r.source}: {r.skipped}" for r in out)
        raise RunError(f"runs: nothing to import from {source} ({reasons})")
    return out


def _import_one(folder: Path, path: Path, runs_dir: Path) -> ImportedRun:
    try:
        records, summary = convert(read_log(path), _label(path))
    except RunError as exc:
        return ImportedRun(folder, None, skipped=str(exc))
    started = min(r["t"] for r in records)
    run = make_run_dir(runs_dir, _label(path), started=started, model_dirs=False)
    try:
        lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        atomic_write_text(RunDir(run).metrics, lines)
        write_summary(run, summary)  # last: the folder is a run from here on
    except BaseException:
        shutil.rmtree(run, ignore_errors=True)
        raise
    return ImportedRun(folder, run, not_drawn=tuple(summary["imported"]["not_drawn"]))


def _label(path: Path) -> str:
    """A run's name from its folder of logs: ``lightning_logs-version_0``."""
    return f"{path.parent.name}-{path.name}" if path.parent.name else path.name
