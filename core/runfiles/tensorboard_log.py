"""A run's TensorBoard event files (``RUN/tb/``): its records as scalars and text, its end as hparams and an image.

The session's recorder (:mod:`core.session.machinery.recording`) hands :class:`TensorBoardLog` the same records
it appends to ``metrics.jsonl``; they are kept and written in batches (every ``WRITE_S`` seconds, at each
checkpoint and at the end), never in a worker. What ``tensorboard --logdir runs/`` then shows of a run:

- scalars by step, one series per worker (``loss/worker0``; a search's per trial, ``loss/trial3``): ``loss``,
  ``lr``, ``samples_per_s`` (each worker's samples over the time between two writes, pauses left out) and every
  figure of its evaluations (``val_loss``, ``val_accuracy``, ``val_rmse``, ...) at the worker's step then;
- ``markers`` (text): the session's states (pauses and resumes among them), live edits, recoveries, warnings,
  where a fork or a continued run started and why a run stopped early;
- at the end: ``final/*`` and ``best/*`` scalars, the hparams (the config's keys flattened, those figures as
  its metrics) and ``evaluation/confusion_matrix`` or ``evaluation/predicted_vs_actual`` (an image).

Events are written with tensorboardX's event writer (numpy and protobuf, no TensorFlow and no TensorBoard).
Each opening makes a new event file (a continued run's go beside its first part's, under the same ``tb/``);
steps go on from where the run starts, so TensorBoard draws the parts as one curve. Every error is raised to
the recorder, which stops writing here and logs one warning: the run never depends on these files.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from core.runfiles.records import CONFIG, EVAL, LOG, RECOVERY, STATE, STEP, Record

WRITE_S = 5.0  # kept records are written at most this often (and at each checkpoint and the end)
MARKERS = "markers"


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, bool | int | float | str]:
    """A nested dict as "section.key" -> a value TensorBoard's hparams take (lists and tables as JSON)."""
    out: dict[str, bool | int | float | str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and not prefix:
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value, separators=(",", ":"), default=str)
    return out


def series(record: Record) -> str:
    """Whose curve a step or eval record is on: its worker's, or in a search its trial's."""
    return f"trial{record['trial']}" if "trial" in record else f"worker{record['worker']}"


class _Window:
    """A series' throughput since the last write: the first and last (time, samples) seen."""

    def __init__(self, t: float, samples: int) -> None:
        self.first = (t, samples)
        self.last = (t, samples)

    def rate(self) -> float | None:
        dt, ds = self.last[0] - self.first[0], self.last[1] - self.first[1]
        return ds / dt if dt > 0 and ds > 0 else None


class TensorBoardLog:
    """One opening of a run's ``tb/`` folder: a new event file, written until :meth:`close`."""

    def __init__(self, folder: Path, start_steps: Sequence[int] = ()) -> None:
        from tensorboardX.event_file_writer import EventsWriter

        folder.mkdir(parents=True, exist_ok=True)
        # a name of its own that sorts after the last opening's: TensorBoard reads a folder's files in the order
        # of their names, and two openings within a second (a quickly continued run) differ only here
        suffix = f".{time.time_ns()}.{os.getpid()}"
        self._writer = EventsWriter(str(folder / "events"), suffix)
        self.folder = folder
        self._lock = threading.Lock()
        self._kept: list[Record] = []
        self._written = time.monotonic()
        self._steps = {f"worker{w}": int(s) for w, s in enumerate(start_steps)}  # each series' last step
        self._floor = max(self._steps.values(), default=0)  # the step of the run's start
        self._marker_step = -1
        self._windows: dict[str, _Window] = {}
        self._closed = False

    # -- records ----------------------------------------------------------------------------------
    def add(self, records: Iterable[Record]) -> None:
        """Keep what TensorBoard shows of ``records``; write what is kept once ``WRITE_S`` have passed."""
        with self._lock:
            self._kept.extend(r for r in records if r.get("kind") in (STEP, EVAL, STATE, LOG, CONFIG, RECOVERY))
            due = time.monotonic() - self._written >= WRITE_S
        if due:
            self.flush()

    def marker(self, text: str) -> None:
        """A line of the run's markers at its latest step (where a fork or a continued run started, ...)."""
        with self._lock:
            self._write([self._marker(text)])

    def flush(self) -> None:
        """Write what is kept and put it on disk (a checkpoint's, the end's)."""
        with self._lock:
            self._write_kept()
            self._sync()

    def _write_kept(self) -> None:
        kept, self._kept = self._kept, []
        events = [event for rec in kept for event in self._events(rec)]
        events.extend(self._rates())
        self._write(events)
        self._written = time.monotonic()

    def _events(self, rec: Record) -> list[Any]:
        kind = rec["kind"]
        if kind == STEP:
            key = series(rec)
            step = self._steps[key] = int(rec["step"])
            window = self._windows.get(key)
            if window is None:
                self._windows[key] = _Window(rec["t"], int(rec["samples"]))
            else:
                window.last = (rec["t"], int(rec["samples"]))
            return [self._scalars(step, rec["t"], {f"loss/{key}": rec["loss"], f"lr/{key}": rec["lr"]})]
        if kind == EVAL:
            key = series(rec)
            figures = {
                f"{name}/{key}": value
                for name, value in rec.items()
                if name.startswith("val_") and isinstance(value, (int, float)) and not isinstance(value, bool)
            }
            return [self._scalars(self._steps.get(key, self._floor), rec["t"], figures)]
        text = _marker_text(rec)
        if text is None:
            return []
        if kind == STATE and rec["state"] == "paused":  # a pause is no slow training: its time is left out
            events = self._rates(pause=True)
            return [*events, self._marker(text, rec["t"])]
        return [self._marker(text, rec["t"])]

    def _rates(self, pause: bool = False) -> list[Any]:
        """Each series' samples per second since the last write. The next window starts where this one ends, or
        after a pause at the first record after it."""
        out = []
        for key, window in list(self._windows.items()):
            rate = window.rate()
            if rate is not None:
                out.append(self._scalars(self._steps[key], window.last[0], {f"samples_per_s/{key}": rate}))
            if pause:
                del self._windows[key]
            else:
                window.first = window.last
        return out

    # -- the end ----------------------------------------------------------------------------------
    def finish(self, config: dict[str, Any], summary: dict[str, Any], evaluation: dict[str, Any] | None) -> None:
        """The run's figures, its hparams and its evaluation's image, then close the file."""
        from tensorboardX.summary import hparams

        with self._lock:
            self._write_kept()
            step, now = self._last_step(), time.time()
            if summary.get("stop_reason"):
                self._write([self._marker(str(summary["stop_reason"]), now)])
            error = f": {summary['error']}" if summary.get("error") else ""
            self._write([self._marker(f"run {summary.get('status')}{error}", now)])
            figures = run_figures(summary)
            self._write([self._scalars(step, now, figures)] if figures else [])
            experiment, start, end = hparams(flatten(config), figures)
            self._write([self._event(step, now, summary=s) for s in (experiment, start, end)])
            picture = _evaluation_image(evaluation) if evaluation else None
            if picture is not None:
                self._write([self._event(step, now, summary=picture)])
            self._sync()
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._write_kept()
            self._closed = True
            self._writer.close()

    # -- events -----------------------------------------------------------------------------------
    def _last_step(self) -> int:
        return max([self._floor, *self._steps.values()])

    def _event(self, step: int, t: float, **fields: Any) -> Any:
        from tensorboardX.proto.event_pb2 import Event

        return Event(step=step, wall_time=t, **fields)

    def _scalars(self, step: int, t: float, values: dict[str, float]) -> Any:
        from tensorboardX.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values.items()])
        return self._event(step, t, summary=summary)

    def _marker(self, text: str, t: float | None = None) -> Any:
        """A markers text at the run's latest step, after the last one: TensorBoard keeps one text a step, and a
        step not after the last drops the ones at it and later."""
        from tensorboardX.summary import text as text_summary

        step = self._marker_step = max(self._last_step(), self._marker_step + 1)
        return self._event(step, time.time() if t is None else t, summary=text_summary(MARKERS, text))

    def _write(self, events: list[Any]) -> None:
        if self._closed:
            return
        for event in events:
            self._writer.write_event(event)

    def _sync(self) -> None:
        if not self._closed:
            self._writer.flush()


def run_figures(summary: dict[str, Any]) -> dict[str, float]:
    """The run's final and best figures as scalar tags (``final/val_loss``, ``best/val_accuracy``, ...)."""
    out = {
        f"final/{k}": float(v)
        for k, v in (summary.get("final") or {}).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    best = summary.get("best")
    if isinstance(best, dict) and isinstance(best.get("value"), (int, float)):
        out[f"best/{best['monitor']}"] = float(best["value"])
    if isinstance(summary.get("samples_per_s"), (int, float)):
        out["final/samples_per_s"] = float(summary["samples_per_s"])
    return out


def _marker_text(rec: Record) -> str | None:
    """What a record says among the markers (None: it is no marker)."""
    kind = rec["kind"]
    if kind == STATE and rec.get("worker") is None:
        detail = f": {rec['detail']}" if rec.get("detail") else ""
        return f"run {rec['state']}{detail}"
    if kind == CONFIG:
        changes = ", ".join(f"{k} {v.get('from')} → {v.get('to')}" for k, v in (rec.get("changes") or {}).items())
        return f"live edit: {changes}"
    if kind == RECOVERY:
        return (
            f"worker {rec['worker']} recovered from a {rec['loss']} loss after step {rec['step']}: weights of step "
            f"{rec['weights_from']}, lr {rec['lr_from']:g} → {rec['lr_to']:g}"
        )
    if kind == LOG and rec.get("level") in ("warning", "error"):
        who = f"worker {rec['worker']}" if rec.get("worker") is not None else "run"
        return f"{who} {rec['level']}: {rec['message']}"
    return None


def _evaluation_image(evaluation: dict[str, Any]) -> Any:
    from tensorboardX.summary import image

    from core.runfiles.figures import evaluation_image

    drawn = evaluation_image(evaluation)
    if drawn is None:
        return None
    name, pixels = drawn
    return image(f"evaluation/{name}", pixels, dataformats="HWC")
