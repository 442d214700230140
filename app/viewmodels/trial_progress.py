"""A search's progress and end, in trials: "Trial 9 of 12 · 8 done", never "Epoch 10/10" (no Qt).

A search's workers train one trial after another, each for up to the
config's epochs (fewer when pruned), so the epochs of a worker say nothing
about the run. Progress here is trials done plus the finished share of the
running ones' epochs, over the run's budget of trials.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from app.viewmodels.run_data import ProgressTracker
from core.services.runs.files import EVAL, TRIAL
from core.services.runs.reading import TRIALS_DONE, RunCount, RunShape

ENDED = ("complete", "pruned", "failed", "stopped")


class TrialProgress(ProgressTracker):
    """ProgressTracker's face (progress, ETA, done) counted in trials of a search."""

    def __init__(self, trials: int, epochs: int, workers: int) -> None:
        super().__init__(epochs, workers)
        self.trials = max(1, trials)
        self.states: dict[int, str] = {}  # trial -> its latest state, for trials of this part of the run
        self._epochs_of: dict[int, int] = {}  # running trial -> epochs it has evaluated
        self._earlier: set[int] = set()  # trials of an earlier part (a continued search): not counted

    @property
    def done_trials(self) -> int:
        """Trials of this part that ran their course (as the reducer counts them: a stopped one did not)."""
        return sum(state in TRIALS_DONE for state in self.states.values())

    def count(self) -> RunCount:
        if self.final is not None:
            return self.final
        return RunCount(self.done_trials, self.trials, "trials")

    @property
    def running_trials(self) -> list[int]:
        return sorted(t for t, state in self.states.items() if state == "running")

    @property
    def progress(self) -> float:
        if self.done:
            return 1.0
        running = sum(min(1.0, self._epochs_of.get(t, 0) / self.epochs) for t in self.running_trials)
        return min(1.0, (self.done_trials + running) / self.trials)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        records = list(records)
        for rec in records:
            trial = rec.get("trial")
            if not isinstance(trial, int) or trial in self._earlier:
                continue
            if rec.get("kind") == TRIAL:
                self.states[trial] = str(rec.get("state"))
            elif rec.get("kind") == EVAL:
                self._epochs_of[trial] = max(self._epochs_of.get(trial, 0), int(rec.get("epoch") or 0))
        super().add(records)  # pauses, the end, and the pace the ETA is measured on

    def set_epochs(self, epochs: int) -> None:
        """A trial's epochs changed: the running trials' shares change with them, and the pace measured
        before says nothing of the trials' new length."""
        self.epochs = max(1, epochs)
        self.forget_pace()

    def resume_from(self, records: Iterable[dict[str, Any]]) -> None:
        """A continued search adds a new budget of trials: the earlier ones are history, not progress."""
        records = list(records)
        self._earlier |= {int(r["trial"]) for r in records if isinstance(r.get("trial"), int)}
        super().resume_from(records)

    def label(self, tail: str, ended: bool = False) -> str:
        """The progress bar's text (``%p%`` is Qt's percentage); ``ended``: the run is over."""
        done = self.count().done
        if ended or self.done or done >= self.trials:
            return f"{self.count().text()} · %p% · {tail}"
        current = min(self.trials, done + max(1, len(self.running_trials)))
        return f"Trial {current} of {self.trials} · {done} done · %p% · {tail}"


def search_end_text(status: str, summary: dict[str, Any]) -> str | None:
    """What a search's end says in the log ("finished: 12 of 12 trials: 8 complete, 3 pruned, 1 failed; best
    trial 5, val_accuracy 0.9722": the run's count, then the study's trials by state); None for a run that is
    not a search."""
    trials = summary.get("trials")
    if not isinstance(trials, list):
        return None
    counts: dict[str, int] = {}
    for t in trials:
        counts[str(t.get("state"))] = counts.get(str(t.get("state")), 0) + 1
    parts = ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    count = RunCount.of_summary(summary)
    done = count.text() if count.unit == "trials" else f"{len(trials)} trial(s)"  # a summary before its count
    text = f"{status}: {done}" + (f": {parts}" if parts else "")
    best = summary.get("best_trial")
    value = next((t.get("value") for t in trials if t.get("number") == best), None)
    if isinstance(best, int):
        text += f"; best trial {best}"
        if isinstance(value, (int, float)):
            text += f", {summary.get('metric', 'value')} {value:.4f}"
    return text


def make_progress(shape: RunShape, epochs: int | None = None, workers: int | None = None) -> ProgressTracker:
    """The progress of a run of ``shape``: in trials for a search, in epochs otherwise."""
    epochs = shape.epochs if epochs is None else epochs
    workers = shape.workers if workers is None else workers
    budget = shape.trials
    return TrialProgress(budget, epochs, workers) if budget else ProgressTracker(epochs, workers, slowest=shape.slowest)
