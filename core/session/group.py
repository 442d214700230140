"""A torchrun group's run: every rank joins the process group, rank 0 decides where each starts and tells them.

Rank 0's run is a new one, or the one a restarted group continues (its restarts counted, the samples the
restart lost too); the other ranks train the part rank 0 gives them and report through it.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.config import Config
from core.launchers import torchrun as tr
from core.runfiles.writing import read_summary
from core.session.session import Session


def join_torchrun(cfg: Config, runs_dir: str | Path, name: str | None = None) -> Session | None:
    """Rank 0's run (a new one, or the one a restarted group continues); None on other ranks, once they trained
    (SystemExit with a failed rank's code). core.errors.PeersLost: the group lost a rank."""
    tr.check_group_config(cfg)
    world = int(os.environ["WORLD_SIZE"])
    cfg = cfg.replace("parallel", strategy="ddp", workers=world)
    tr.join_group(cfg)
    rank = int(os.environ["RANK"])
    if rank != 0:
        start = tr.broadcast(None)
        if start is None:  # rank 0 could not set up the run and says why
            return None
        code = tr.run_other_rank(start["config"], start["fields"][rank], Path(runs_dir))
        if code:
            raise SystemExit(code)
        return None
    session = None
    try:
        previous = tr.find_run(Path(runs_dir))
        if previous is not None:
            run_dir, restarts = previous
            before = read_summary(run_dir) or {}
            launcher = tr.TorchrunLauncher(restarts=restarts + 1)
            session = Session.from_run(run_dir, epochs=cfg.train.epochs, launcher=launcher)
            resumed_samples = sum(p.samples for p in session.start_positions())
            lost = max(0, int(before.get("samples") or 0) - resumed_samples)
            launcher.samples_lost = int(before.get("samples_lost") or 0) + lost
        else:
            session = Session(cfg, runs_dir=runs_dir, name=name, launcher=tr.TorchrunLauncher())
    finally:
        fields = [session.start_fields(r) for r in range(world)] if session is not None else None
        tr.broadcast({"config": session.config, "fields": fields} if session is not None else None)
    return session
