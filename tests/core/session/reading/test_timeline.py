"""The Timeline places every record of a run on the step, epoch and time axes."""

from __future__ import annotations

from core.session.reading.timeline import Timeline


def rec(kind: str, t: float, **kw: object) -> dict[str, object]:
    return {"kind": kind, "t": t, **kw}


def test_an_evaluation_lies_at_its_workers_latest_step_and_time_starts_at_training() -> None:
    records = [
        rec("state", 100.0, worker=None, state="starting"),
        rec("state", 102.0, worker=0, state="running"),
        rec("step", 102.1, worker=0, epoch=1, step=1, samples=30, loss=1.0),
        rec("step", 102.2, worker=0, epoch=1, step=2, samples=60, loss=0.9),
        rec("eval", 102.25, worker=0, epoch=1, val_loss=0.8),
        rec("step", 102.3, worker=0, epoch=2, step=3, samples=90, loss=0.7),
        rec("step", 102.4, worker=0, epoch=2, step=4, samples=120, loss=0.6),
        rec("eval", 102.45, worker=0, epoch=2, val_loss=0.5),
    ]
    places = [p for _r, p in Timeline.of(records).place(records)]
    assert [p.step for p in places] == [1, 2, 2, 3, 4, 4]
    assert [p.epoch for p in places] == [0.5, 1.0, 1.0, 1.5, 2.0, 2.0]
    assert abs(places[0].time - 0.1) < 1e-9 and abs(places[-1].time - 0.45) < 1e-9  # start-up not counted


def test_a_later_part_follows_on_without_the_gap_and_trials_are_kept_apart() -> None:
    tl = Timeline()
    first = [
        rec("step", 10.0, worker=0, epoch=1, step=1, samples=10, loss=1.0),
        rec("step", 11.0, worker=0, epoch=1, step=2, samples=20, loss=1.0),
    ]
    later = [
        rec("state", 2000.0, worker=None, state="starting"),
        rec("state", 2005.0, worker=0, state="running"),
        rec("step", 2005.5, worker=0, epoch=2, step=3, samples=30, loss=0.5, trial=4),
    ]
    places = [p for _r, p in tl.place(first + later)]
    assert [p.time for p in places] == [0.0, 1.0, 1.5]  # the 2,000 s between the parts are gone
    assert tl.parts == 2
    assert places[-1].trial == 4 and places[0].trial is None
