"""traindesk predict --on ray: Ray Data on the session's local Ray cluster (tests/ray_cluster.py) writes the
file local ``predict`` writes, byte for byte, from a CSV, a Parquet file, an NPZ and a table model's CSV."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("ray", reason="Ray is an extra: pip install 'traindesk[ray]'")

from tests.cli_run import core_env, run_core
from tests.trained_run import make_run, table_run

ROOT = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.timeout(900)
N_FEATURES = 5


def _predict(model: Path, data: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = core_env()
    return run_core("predict", str(model), str(data), "--out", str(out), *args, timeout=600, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def npz_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A model trained on an NPZ (f0..f4, classes 0-2), and a folder of 700 new rows as CSV, Parquet, NPZ."""
    root = tmp_path_factory.mktemp("ray-predict")
    rng = np.random.default_rng(4)
    y = rng.integers(0, 3, 300)
    x = (rng.normal(0, 1, (300, N_FEATURES)) + y[:, None]).astype(np.float32)
    np.savez(root / "train.npz", x=x, y=y)
    run = make_run(root / "runs", source=f"npz:{root / 'train.npz'}", steps=20)
    n = 700
    labels = rng.integers(0, 3, n)
    new = (rng.normal(0, 1, (n, N_FEATURES)) + labels[:, None]).astype(np.float32)
    names = [f"f{j}" for j in range(N_FEATURES)]
    with (root / "rows.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", *names, "label"])
        for i, row in enumerate(new):
            w.writerow([f"r{i}", *(repr(float(v)) for v in row), int(labels[i])])
    cols = {"id": [f"r{i}" for i in range(n)], **{c: new[:, j].astype(np.float64) for j, c in enumerate(names)}}
    pq.write_table(pa.table({**cols, "label": labels.tolist()}), root / "rows.parquet")
    np.savez(root / "rows.npz", x=new, y=labels)
    return run, root


@pytest.mark.parametrize("kind", ["csv", "parquet", "npz"])
def test_predict_on_ray_writes_what_local_predict_writes(
    ray_cluster: str, npz_run: tuple[Path, Path], tmp_path: Path, kind: str
) -> None:
    run, root = npz_run
    data = root / f"rows.{kind}"
    here = _predict(run, data, tmp_path / "here.csv", "--workers", "1")
    assert here.returncode == 0, here.stderr
    on_ray = _predict(
        run, data, tmp_path / "ray.csv", "--on", "ray", "--ray-address", ray_cluster, "--workers", "2",
        "--batch-rows", "64",
    )  # fmt: skip
    assert on_ray.returncode == 0, on_ray.stderr
    text = (tmp_path / "ray.csv").read_text()
    assert text == (tmp_path / "here.csv").read_text()
    assert len(text.splitlines()) == 701


def test_a_table_models_csv_on_ray_writes_what_local_predict_writes(ray_cluster: str, tmp_path: Path) -> None:
    """A model trained on a table with a schema: its raw rows (a category, a missing number, an unseen level)."""
    islands = ("Biscoe", "Dream", "Torgersen")
    lines = ["row_id,size,island,label"]
    for i in range(90):
        size = "" if i % 7 == 0 else repr(1.5 + (i % 9) * 0.25)
        lines.append(f"{1000 + i},{size},{islands[i % 3]},{('adelie', 'gentoo')[(i % 3 == 0) ^ (i % 2)]}")
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    run = table_run(tmp_path / "train.csv", tmp_path / "runs")
    new = lines[:1] + [line.replace("Dream", "Unseen") if k == 4 else line for k, line in enumerate(lines[1:40])]
    (tmp_path / "new.csv").write_text("\n".join(new) + "\n")
    here = _predict(run, tmp_path / "new.csv", tmp_path / "here.csv")
    on_ray = _predict(run, tmp_path / "new.csv", tmp_path / "ray.csv", "--on", "ray", "--ray-address", ray_cluster)
    assert here.returncode == 0 and on_ray.returncode == 0, (here.stderr, on_ray.stderr)
    assert (tmp_path / "ray.csv").read_text() == (tmp_path / "here.csv").read_text()
    noted = [line for line in on_ray.stderr.splitlines() if "not seen in training" in line]
    assert noted and noted == [line for line in here.stderr.splitlines() if "not seen in training" in line]


def test_a_bad_block_is_the_local_one_line_error(ray_cluster: str, npz_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, root = npz_run
    lines = (root / "rows.csv").read_text().splitlines()
    header = lines[0].split(",")
    keep = [i for i, name in enumerate(header) if name != "f2"]  # a feature column left out
    (tmp_path / "short.csv").write_text(
        "\n".join(",".join(line.split(",")[i] for i in keep) for line in lines[:50]) + "\n"
    )
    here = _predict(run, tmp_path / "short.csv", tmp_path / "here.csv")
    on_ray = _predict(run, tmp_path / "short.csv", tmp_path / "ray.csv", "--on", "ray", "--ray-address", ray_cluster)
    assert here.returncode == on_ray.returncode == 2
    said = [line for line in on_ray.stderr.splitlines() if line.startswith("predict: ")]
    assert said == here.stderr.strip().splitlines(), on_ray.stderr
    assert not (tmp_path / "ray.csv").exists()
