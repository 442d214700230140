"""Runs mirrored to a real MLflow tracking server (127.0.0.1, sqlite store), read back with MLflow's client.

The server may be down at the start or go away mid-run: the run finishes, and every metric point arrives once.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.config import Config, apply_overrides, to_dict
from core.runfiles.layout import RunDir
from core.runfiles.tensorboard_log import flatten
from core.session import RecordBuffer, Session
from core.tracking import live_mirror
from core.tracking.mlflow_mirror import RUN_TAG, metrics_of, read_mirrors
from tests.cli_run import core_env, run_core
from tests.core.tracking.mlflow_server import MlflowServer

pytestmark = pytest.mark.slow

DIGITS = ['data.source="builtin:digits"', "train.batch_size=64", "model.hidden=[32]"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[MlflowServer]:
    s = MlflowServer(tmp_path / "mlflow").start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attempts while the server is down come every half second, and the end waits 3 s for it."""
    monkeypatch.setattr(live_mirror, "RETRY_S", (0.5,))
    monkeypatch.setattr(live_mirror, "END_S", 3.0)


def cfg_for(uri: str, *overrides: str) -> Config:
    return apply_overrides(Config(), [*DIGITS, f'tracking.mlflow="{uri}"', *overrides])


def expected_points(run: Path) -> Counter[tuple[str, int, float]]:
    """What metrics.jsonl holds as (key, step, value), each once."""
    steps: dict[str, int] = {}
    return Counter((k, s, v) for rec in RunDir(run).read_records() for k, v, _, s in metrics_of(rec, steps))


def server_points(client: Any, run_id: str) -> Counter[tuple[str, int, float]]:
    keys = [k for k in client.get_run(run_id).data.metrics if "/worker" in k or "/trial" in k]
    return Counter((k, m.step, m.value) for k in keys for m in client.get_metric_history(run_id, k))


def logs(run: Path, level: str) -> list[str]:
    return [r["message"] for r in RunDir(run).read_records() if r["kind"] == "log" and r["level"] == level]


def finished(session: Session, timeout: float = 300) -> Path:
    session.start()
    status = session.wait(timeout)
    if status is None:
        session.stop(5)
        pytest.fail("run did not finish in time")
    assert status == "finished", session.error
    assert session.run_dir is not None
    return session.run_dir


def wait_for(what: str, done: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_a_run_arrives_with_params_metrics_by_step_tags_and_artifacts(server: MlflowServer, runs_dir: Path) -> None:
    cfg = cfg_for(server.uri, "parallel.strategy=hogwild", "parallel.workers=2", "train.epochs=3")
    run = finished(Session(cfg, runs_dir=runs_dir))
    client = server.client()
    [entry] = read_mirrors(run).values()
    assert entry.uri == server.uri and entry.ended == "FINISHED"
    got = client.get_run(entry.run_id)
    assert got.info.status == "FINISHED"
    flat = flatten(to_dict(cfg))
    assert got.data.params == {k: str(v) for k, v in flat.items()}
    tags = got.data.tags
    assert tags[RUN_TAG] == run.name and tags["traindesk.strategy"] == "hogwild" and tags["traindesk.workers"] == "2"
    assert tags["traindesk.dataset"] and tags["mlflow.runName"] == run.name
    expected = expected_points(run)
    assert {k for k, _, _ in expected} >= {"loss/worker0", "loss/worker1", "lr/worker0", "val_accuracy/worker0"}
    assert server_points(client, entry.run_id) == expected  # every point, each once, at its step
    summary = RunDir(run).read_summary()
    assert summary is not None
    assert got.data.metrics["final/val_accuracy"] == pytest.approx(summary["final"]["val_accuracy"])
    assert got.data.metrics["samples_per_s"] == pytest.approx(summary["samples_per_s"])
    artifacts = {a.path for a in client.list_artifacts(entry.run_id)}
    assert {"config.toml", "summary.json", "eval.json"} <= artifacts
    assert logs(run, "warning") == []
    assert any(entry.link in m for m in logs(run, "info")), "the log says where the run went"


def test_a_server_that_goes_away_mid_run_gets_every_point_once(
    server: MlflowServer, runs_dir: Path, quick_retries: None
) -> None:
    session = Session(cfg_for(server.uri, "parallel.strategy=single", "train.epochs=100000"), runs_dir=runs_dir)
    buf = RecordBuffer()
    session.add_listener(buf.put)
    seen: list[dict[str, Any]] = []

    def said(words: str) -> bool:
        seen.extend(buf.drain(0.05))
        return any(r["kind"] == "log" and words in r["message"] for r in seen)

    def steps() -> int:
        seen.extend(buf.drain(0.05))
        return sum(r["kind"] == "step" for r in seen)

    session.start()
    try:
        client = server.client()
        wait_for("a first mirrored point", lambda: session.run_dir and read_mirrors(session.run_dir))
        run_id = next(iter(read_mirrors(session.run_dir).values())).run_id  # type: ignore[arg-type]
        wait_for("points on the server", lambda: client.get_metric_history(run_id, "loss/worker0"))
        server.stop()
        wait_for("the warning", lambda: said("mlflow: "))
        steps_then = steps()
        wait_for("steps while it is down", lambda: steps() > steps_then + 3)
        server.start()
        wait_for("the server again", lambda: said("answers again"))
    finally:
        status = session.stop(60)
    assert status == "stopped"
    run = session.run_dir
    assert run is not None
    assert len([m for m in logs(run, "warning") if m.startswith("mlflow: ")]) == 1, logs(run, "warning")
    entry = read_mirrors(run)[server.uri]
    assert entry.ended == "KILLED"
    assert server_points(server.client(), run_id) == expected_points(run)


def test_a_server_down_at_the_start_costs_the_run_nothing_and_runs_to_mlflow_sends_it_later(
    tmp_path: Path, runs_dir: Path, quick_retries: None
) -> None:
    server = MlflowServer(tmp_path / "mlflow")  # not started yet: nothing answers on its port
    session = Session(cfg_for(server.uri, "parallel.strategy=single", "train.epochs=2"), runs_dir=runs_dir)
    buf = RecordBuffer()
    session.add_listener(buf.put)
    run = finished(session)
    warnings = logs(run, "warning")
    assert len(warnings) == 2, warnings
    assert "does not answer" in warnings[0] and f"traindesk runs --to-mlflow {server.uri}" in warnings[1]
    heard = [r["message"] for r in buf.drain(0.1) if r["kind"] == "log" and r["level"] == "warning"]
    assert heard == warnings, "the window and the command line hear both"
    assert server.uri not in read_mirrors(run) or not read_mirrors(run)[server.uri].ended
    server.start()
    try:
        env = core_env()
        first = run_core("runs", "--to-mlflow", server.uri, str(run), timeout=300, env=env)
        assert first.returncode == 0, first.stderr
        assert "metric points sent" in first.stdout
        again = run_core("runs", "--to-mlflow", server.uri, str(run), timeout=300, env=env)
        assert again.returncode == 0 and "nothing new" in again.stdout, again.stdout + again.stderr
        entry = read_mirrors(run)[server.uri]
        assert entry.ended == "FINISHED"
        assert server_points(server.client(), entry.run_id) == expected_points(run)
    finally:
        server.stop()


def test_a_continued_run_goes_on_in_the_same_mlflow_run_and_a_fork_names_its_parent(
    tmp_path: Path, runs_dir: Path
) -> None:
    from core.services.runs.start import continue_run, fork_run
    from core.services.tracking import mirror_run

    uri = f"sqlite:///{tmp_path / 'local.db'}"  # a local store: no server
    run = finished(Session(cfg_for(uri, "parallel.strategy=single", "train.epochs=1"), runs_dir=runs_dir))
    first = read_mirrors(run)[uri]
    more = continue_run(run, epochs=2, runs_dir=runs_dir)
    more.start()
    assert more.wait(300) == "finished"
    again = read_mirrors(run)[uri]
    assert again.run_id == first.run_id and again.ended == "FINISHED"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    assert server_points(client, first.run_id) == expected_points(run)
    RunDir(run).mlflow.unlink()  # how far it got is lost: the run is found by its tag, nothing is sent twice
    assert mirror_run(run, uri).entry.run_id == first.run_id
    assert server_points(client, first.run_id) == expected_points(run)
    child = fork_run(run, {"optim.lr": 0.01, "train.epochs": 3}, runs_dir=runs_dir)
    child.start()
    assert child.wait(300) == "finished"
    assert child.run_dir is not None
    forked = client.get_run(read_mirrors(child.run_dir)[uri].run_id)
    assert forked.data.tags["mlflow.parentRunId"] == first.run_id
    assert forked.data.tags["traindesk.parent"] == run.name


def test_a_uri_that_is_not_one_is_one_line_at_the_start_and_nothing_runs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = run_core(
        "train", "--mlflow", "htp://nowhere", "--epochs", "1", "--runs-dir", str(runs), timeout=120, env=core_env()
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "config: tracking.mlflow must be an MLflow tracking URI (http://HOST:PORT, https://HOST, sqlite:///PATH, "
        'databricks, ...), got "htp://nowhere"'
    ]
    assert not runs.exists() or not any(runs.iterdir())
    bad_env = run_core(
        "train", "--epochs", "1", "--runs-dir", str(runs), timeout=120, env=core_env(MLFLOW_TRACKING_URI="x")
    )
    assert bad_env.returncode == 2 and bad_env.stderr.startswith("MLFLOW_TRACKING_URI must be"), bad_env.stderr


def test_a_file_store_is_refused_in_one_line_that_names_sqlite(tmp_path: Path) -> None:
    from core.config import ConfigError
    from core.services.tracking import check_uri

    with pytest.raises(ConfigError) as refused:
        check_uri(f"file:{tmp_path / 'mlruns'}")
    line = str(refused.value)
    assert line.startswith("--to-mlflow must be a tracking URI other than a file store") and "\n" not in line
    assert "sqlite:///PATH/mlflow.db" in line
