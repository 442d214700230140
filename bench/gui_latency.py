"""GUI latency benchmark (offscreen): record-to-plot latency, event-loop stalls, redraw rate.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/gui_latency.py [--workers 4] [--epochs 250]

1. A real run in the real window (digits, MLP, hogwild): for every step record,
   the time from its creation in a worker (its ``t``) to the frame that put its
   point in the plot's data; median and p95.
2. The same run: the event loop's longest gap, measured by a 10 ms QTimer.
3. A loss plot holding 1,000,000 points: redraws per second (a few points
   appended, one setData, one full repaint of the plot per frame).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication


def pump(app: QApplication, seconds: float, until: Any = None) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        if until is not None and until():
            return
        time.sleep(0.001)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def live_run(app: QApplication, workers: int, epochs: int, runs_dir: str) -> dict[str, float]:
    from app.main_window import MainWindow
    from core.config import Config
    from core.launchers import local as launcher

    launcher.warm_up(block=True)
    window = MainWindow(runs_dir=runs_dir)
    window.ask_before_close = False
    window.resize(1280, 800)
    window.show()
    window.panel.set_config(Config().replace("train", epochs=epochs).replace("parallel", workers=workers))
    pump(app, 1.0)

    waiting: list[float] = []  # t of step records added but not yet drawn
    latencies: list[float] = []
    original_add = window.plots.add_records

    def add_records(records: list[dict[str, Any]]) -> Any:
        waiting.extend(r["t"] for r in records if r.get("kind") == "step")
        return original_add(records)

    def on_frame(_changes: Any) -> None:
        now = time.time()
        latencies.extend(now - t for t in waiting)
        waiting.clear()

    window.plots.add_records = add_records  # type: ignore[method-assign]  # timed: each batch's arrival is noted
    window.plots.frame_callbacks.append(on_frame)

    gaps: list[float] = []
    last = [time.monotonic()]

    def on_tick() -> None:
        now = time.monotonic()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(on_tick)
    started = time.monotonic()
    window.action_start.trigger()
    pump(app, 60, lambda: window.plots.loss.point_count(workers - 1) > 0)
    first_point_s = time.monotonic() - started
    last[0] = time.monotonic()
    timer.start()
    pump(app, 600, lambda: window.controller.state in ("finished", "stopped", "failed"))
    timer.stop()
    state = window.controller.state
    summary = window.controller.session.summary or {}
    window.close()
    pump(app, 30, lambda: not window.isVisible())
    window.deleteLater()
    pump(app, 0.2)
    if state != "finished" or not latencies:
        raise SystemExit(f"the run did not finish ({state}); nothing to report")
    return {
        "first_point_s": first_point_s,
        "latency_median_ms": statistics.median(latencies) * 1000,
        "latency_p95_ms": percentile(latencies, 0.95) * 1000,
        "records": len(latencies),
        "stall_max_ms": max(gaps) * 1000,
        "stall_p99_ms": percentile(gaps, 0.99) * 1000,
        "train_s": float(summary.get("train_s", 0.0)),
        "samples_per_s": float(summary.get("samples_per_s", 0.0)),
    }


def redraw_rate(app: QApplication, points: int, seconds: float) -> dict[str, float]:
    from app.plots.live import PlotsPanel

    panel = PlotsPanel()
    panel.resize(1000, 650)
    panel.show()
    pump(app, 0.5)
    t0 = 1000.0
    steps = points
    # one worker, `points` steps, a noisy decaying loss; fed in big batches (as a replay would)
    chunk = 100_000
    rng_state = 0
    for start in range(0, steps, chunk):
        recs = []
        for i in range(start, min(steps, start + chunk)):
            rng_state = (rng_state * 1103515245 + 12345) & 0x7FFFFFFF
            recs.append(
                {
                    "kind": "step",
                    "t": t0 + i * 0.001,
                    "worker": 0,
                    "epoch": 1,
                    "step": i + 1,
                    "samples": (i + 1) * 64,
                    "loss": 2.0 / (1 + i * 1e-4) + (rng_state / 2**31) * 0.1,
                }
            )
        panel.add_records(recs)
    panel.flush()
    pump(app, 0.5)
    assert panel.loss.point_count(0) == points, panel.loss.point_count(0)
    frames = 0
    n = steps
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        recs = [
            {
                "kind": "step",
                "t": t0 + (n + k) * 0.001,
                "worker": 0,
                "epoch": 1,
                "step": n + k + 1,
                "samples": (n + k + 1) * 64,
                "loss": 0.5,
            }
            for k in range(3)
        ]
        n += 3
        panel.add_records(recs)
        panel.flush()
        panel.loss.viewport().repaint()
        app.processEvents()
        frames += 1
    elapsed = time.perf_counter() - started
    panel.close()
    panel.deleteLater()
    pump(app, 0.2)
    return {
        "points": panel.data.loss[0].__len__(),
        "redraws_per_s": frames / elapsed,
        "ms_per_redraw": elapsed / frames * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=250)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="traindesk-bench-") as tmp:
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, tmp)
        app = QApplication.instance() or QApplication([sys.argv[0]])
        live = live_run(app, args.workers, args.epochs, str(Path(tmp) / "runs"))
        redraw = redraw_rate(app, args.points, args.seconds)

    print(f"GUI latency benchmark (offscreen, {os.cpu_count()} cores, {args.workers} hogwild workers, digits MLP)")
    print(f"  first point on screen after Start   {live['first_point_s']:.2f} s")
    print(
        f"  record -> plot data latency         median {live['latency_median_ms']:.0f} ms,"
        f" p95 {live['latency_p95_ms']:.0f} ms  ({live['records']:,} step records)"
    )
    print(f"  event loop longest stall            {live['stall_max_ms']:.0f} ms (p99 {live['stall_p99_ms']:.0f} ms)")
    print(f"  training during the run             {live['samples_per_s']:,.0f} samples/s over {live['train_s']:.1f} s")
    print(
        f"  redraw with {redraw['points']:,} points         {redraw['redraws_per_s']:.1f} redraws/s"
        f" ({redraw['ms_per_redraw']:.1f} ms each)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
