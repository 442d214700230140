"""The figures of the tuning features on digits with an MLP, from one run of this script.

- the default config's run (its validation accuracy is the bar the search must reach);
- a search of 12 trials (resources/configs/search-digits.toml, 2 workers): best accuracy,
  trials pruned, trials listed; then a continuation, which adds 12 trials to the study;
- lr-find's suggestion, and a default run with it;
- fp32 against bf16-mixed: samples/s and accuracy of one single-worker run each.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from core.config import Config, apply_overrides, load_config
from core.services.lr_finder import find_lr
from core.session import Session

ROOT = Path(__file__).resolve().parents[1]


def run(cfg: Config, runs_dir: Path) -> Session:
    s = Session(cfg, runs_dir=runs_dir)
    s.start()
    s.wait()
    return s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=10)
    args = p.parse_args()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        default = run(Config(), runs)
        assert default.summary is not None
        out["default_val_accuracy"] = default.summary["final"]["val_accuracy"]

        search = run(load_config(ROOT / "resources/configs/search-digits.toml"), runs)
        s = search.summary or {}
        out["search"] = {
            "status": s.get("status"),
            "best_val_accuracy": s["final"]["val_accuracy"],
            "best_params": s.get("best_params"),
            "trials": len(s.get("trials", [])),
            "pruned": s.get("trials_pruned"),
            "wall_s": s.get("wall_s"),
            "importance": s.get("importance"),
        }
        assert search.run_dir is not None
        more = Session.from_run(search.run_dir)
        more.start()
        more.wait()
        out["search_continued_trials"] = len((more.summary or {}).get("trials", []))

        found = find_lr(Config())
        lr_run = run(apply_overrides(Config(), [f"optim.lr={found.suggestion}"]), runs)
        assert lr_run.summary is not None
        out["lr_find"] = {
            "suggestion": found.suggestion,
            "val_accuracy_with_it": lr_run.summary["final"]["val_accuracy"],
        }

        for precision in ("32", "bf16-mixed"):
            cfg = apply_overrides(
                Config(),
                ["parallel.strategy=single", f"train.epochs={args.epochs}", f'parallel.precision="{precision}"'],
            )
            r = run(cfg, runs).summary or {}
            out[f"precision_{precision}"] = {
                "samples_per_s": r.get("samples_per_s"),
                "val_accuracy": r["final"]["val_accuracy"],
            }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
