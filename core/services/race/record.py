"""race.json: what a race was, how far it got, who won, and how far its winner's install went."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.runfiles.writing import atomic_write_json

RACE_FILE = "race.json"


@dataclass
class Entry:
    """One variant in race.json."""

    index: int
    label: str
    changes: dict[str, Any]
    run: str = ""  # its run folder, relative to the race folder
    figures: list[float | None] = field(default_factory=list)  # its figure at each rung reached
    out: str = ""  # why it stopped racing ("rung 2: 0.912 < 0.931", "failed: ...")


@dataclass
class RaceRecord:
    """race.json: what a race was, how far it got, who won."""

    run: str
    start_epoch: int
    start_step: int
    metric: str
    rungs: list[int]
    keep: int
    variants: list[Entry]
    state: str = "running"  # running | stopped | done
    rung: int = 0  # the rung being raced (its index)
    winner: int | None = None
    as_fork: bool = False
    from_worker: int | None = None  # a sweep's: the worker cloned
    started: float = field(default_factory=time.time)
    # the winner's install so far (core.services.race.install): its marker, a fork's folder, the run's records'
    # length before them and whether they went in; a race resumed after a crash part-way finishes it once
    install: dict[str, Any] = field(default_factory=dict)

    def alive(self) -> list[Entry]:
        return [v for v in self.variants if not v.out]

    def save(self, folder: Path) -> None:
        atomic_write_json(folder / RACE_FILE, asdict(self))

    @classmethod
    def load(cls, folder: Path) -> RaceRecord:
        import json

        data = json.loads((folder / RACE_FILE).read_text(encoding="utf-8"))
        data["variants"] = [Entry(**v) for v in data["variants"]]
        return cls(**data)


TIE_REL = 1e-9  # figures this close (relative) are equal: a float's last bits say nothing of a variant


def race_summary(record: RaceRecord, folder: Path, marker: str) -> dict[str, Any]:
    """A race as summary.json keeps it: its folder (from the raced run), marker, figure, rungs and each
    variant's figures at the rungs it reached and why it stopped."""
    return {
        "folder": f"races/{folder.name}",
        "marker": marker,
        "metric": record.metric,
        "rungs": list(record.rungs),
        "winner": record.winner,
        "variants": [
            {"label": v.label, "changes": dict(v.changes), "figures": list(v.figures), "out": v.out}
            for v in record.variants
        ],
    }
