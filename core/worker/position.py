"""Where a worker is in its run: the one type for a resume position.

A worker's position travels from its trainer (``Trainer.position()``) in its
snapshot and last records, into a checkpoint's ``progress`` table, back out of
it into the ``WorkerSpec`` of a resumed or forked run, and into the summary's
totals. Everywhere it is a :class:`Position`; on disk (checkpoints) and in the
worker's records it is the same flat dict of these field names as always, so
files written before and after read the same. No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

# a table entry may lack these (checkpoints written before they existed): their defaults then apply
_OPTIONAL = frozenset({"offset", "lr_scale", "lr_factor"})


@dataclass(frozen=True)
class Position:
    """A worker's place in the run, at a batch boundary."""

    epoch: int = 1  # the epoch in progress (1-based)
    batch: int = 0  # batches of it done
    step: int = 0  # optimizer steps taken so far
    samples: int = 0  # training samples seen so far
    offset: int = -1  # samples of the epoch in progress done; -1: ``batch`` whole batches
    lr_scale: float = 1.0  # the plateau schedule's factor reached so far
    lr_factor: float = 1.0  # what recoveries from a diverged loss left of this worker's rate (1/10 each)

    # the counters every stored position holds (a progress table entry without one is unusable)
    COUNTERS: ClassVar[tuple[str, ...]]

    @classmethod
    def holds(cls, table: Any) -> bool:
        """Whether ``table`` (a record, a checkpoint's progress entry) holds a position: every counter an int."""
        return isinstance(table, Mapping) and all(isinstance(table.get(k), int) for k in cls.COUNTERS)

    @classmethod
    def of(cls, table: Mapping[str, Any]) -> Position:
        """The position a record or a progress entry holds (the optional fields default)."""
        return cls(
            **{k: int(table[k]) for k in cls.COUNTERS},
            offset=int(table.get("offset", -1)),
            lr_scale=float(table.get("lr_scale", 1.0)),
            lr_factor=float(table.get("lr_factor", 1.0)),
        )

    def as_dict(self) -> dict[str, Any]:
        """The flat dict of records and checkpoints."""
        return asdict(self)

    def counters(self) -> dict[str, int]:
        """epoch, batch, step, samples."""
        return {k: int(getattr(self, k)) for k in self.COUNTERS}


Position.COUNTERS = tuple(f.name for f in fields(Position) if f.name not in _OPTIONAL)
START = Position(offset=0)  # a run's beginning
