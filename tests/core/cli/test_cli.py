"""The command line as a user runs it: exit codes, one-line errors, the run directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_run import core_env, run_core, start_core

ROOT = Path(__file__).resolve().parents[3]


def traindesk(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_core(
        *args,
        cwd=cwd,
        timeout=timeout,
        env=core_env(),
    )


def test_train_prints_run_dir_last(tmp_path: Path) -> None:
    res = traindesk(
        "train",
        str(ROOT / "resources/configs/hogwild.toml"),
        "--epochs",
        "2",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--name",
        "cli",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    run_dir = Path(res.stdout.strip().splitlines()[-1])
    assert run_dir.parent == tmp_path / "runs" and run_dir.name.endswith("-cli")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    assert "epoch 2/2" in res.stderr
    listing = traindesk("runs", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert run_dir.name in listing.stdout and "finished" in listing.stdout


def _bad_inputs(tmp_path: Path) -> list[tuple[list[str], str]]:
    (tmp_path / "unknown.toml").write_text("[train]\nepochs = 2\nspeed = 3\n")
    (tmp_path / "type.toml").write_text('[parallel]\nworkers = "two"\n')
    (tmp_path / "nonnum.csv").write_text("a,label\n1,x\nabc,y\n")
    (tmp_path / "notarget.csv").write_text("a,b\n1,2\n")
    (tmp_path / "empty.csv").write_text("")
    return [
        (["train", str(tmp_path / "unknown.toml")], "unknown key train.speed"),
        (["train", str(tmp_path / "type.toml")], 'parallel.workers must be an integer from 1 to 256, got "two"'),
        (["train", str(tmp_path / "missing.toml")], "file not found"),
        (["train", "--set", f"data.source=csv:{tmp_path / 'nonnum.csv'}"], "column 'a' is not numeric"),
        (["train", "--set", f"data.source=csv:{tmp_path / 'notarget.csv'}"], "target column 'label' not found"),
        (["train", "--set", f"data.source=csv:{tmp_path / 'empty.csv'}"], "is empty"),
        (["train", "--set", f"data.source=csv:{tmp_path / 'nothere.csv'}"], "file not found"),
        (["train", "--workers", "0"], "parallel.workers must be an integer from 1 to 256, got 0"),
        (["train", "--strategy", "magic"], "invalid choice: 'magic'"),
        (["frobnicate"], "invalid choice"),
    ]


def test_input_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    for args, message in _bad_inputs(tmp_path):
        res = (
            traindesk(*args, "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
            if args[0] == "train"
            else traindesk(*args, cwd=tmp_path)
        )
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, res.stderr)
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_ctrl_c_stops_cleanly_with_exit_130(tmp_path: Path) -> None:
    proc = start_core(
        "train",
        "--epochs",
        "10000",
        "--runs-dir",
        str(tmp_path / "runs"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=core_env(),
    )
    try:
        deadline = time.monotonic() + 60
        metrics = None
        while time.monotonic() < deadline:
            found = list((tmp_path / "runs").glob("*/metrics.jsonl"))
            if found and '"kind":"step"' in found[0].read_text():
                metrics = found[0]
                break
            time.sleep(0.2)
        assert metrics is not None, "training never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    run_dir = Path(out.strip().splitlines()[-1])
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "stopped"
    assert (run_dir / "checkpoints" / "last.pt").stat().st_size > 0


def test_python_m_core_help() -> None:
    res = run_core(
        "--help",
        env=core_env(),
        timeout=60,
    )
    assert res.returncode == 0 and "train" in res.stdout


def test_help_lists_every_command_without_importing_them() -> None:
    code = (
        "import json, sys\n"
        "from core import cli\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps([m for m in sys.modules if m.split('.')[0] in ('core', 'app', 'torch', 'PySide6')]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=core_env(),
    )
    assert res.returncode == 0, res.stderr
    from core.cli import COMMANDS

    for name, command in COMMANDS.items():
        assert name in res.stdout and command.summary.split()[0] in res.stdout
    loaded = set(json.loads(res.stdout.strip().splitlines()[-1]))
    command_modules = {t.partition(":")[0] for c in COMMANDS.values() for t in (c.run, c.configure) if t}
    assert loaded & (command_modules - {"core.cli"}) == set()
    assert not [m for m in loaded if not m.startswith("core")], loaded


def test_command_table_names_functions_that_exist() -> None:
    from core import cli

    for name, command in cli.COMMANDS.items():
        for target in (command.run, command.configure):
            if target is not None:
                assert callable(cli._load(target)), (name, target)


def test_gui_command_is_an_installed_entry_point() -> None:
    from importlib.metadata import entry_points

    from core import cli

    outside = [name for name, command in cli.COMMANDS.items() if command.run is None]
    assert outside == ["gui"]
    found = entry_points(group=cli.ENTRY_POINT_GROUP, name="gui")
    assert [ep.value for ep in found] == ["app.main:main"]


def _group_gone(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _big_csv(path: Path, blocks: int) -> None:
    """About 66 kB of one-line records per block (1,000 rows of 16 features and a label), written fast."""
    rows = "".join(",".join(f"{(r * 7 + c) % 100 / 10:.1f}" for c in range(16)) + f",{r % 3}\n" for r in range(1000))
    data = rows.encode()
    with path.open("wb") as fh:
        fh.write((",".join(f"f{i}" for i in range(16)) + ",label\n").encode())
        for _ in range(blocks):
            fh.write(data)


def test_a_ctrl_c_while_the_forkserver_starts_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that lands while the forkserver is being created reaches the command's handler once the
    server exists (before, SIGINT was ignored meanwhile and the command went on to train), and the server
    starts with SIGINT blocked, so its imports cannot raise KeyboardInterrupt."""
    from core.launchers import local

    seen: list[int] = []
    blocked_in_child: list[bool] = []

    def create() -> None:
        blocked_in_child.append(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
        os.kill(os.getpid(), signal.SIGINT)  # the terminal's Ctrl-C, in the middle of the fork

    monkeypatch.setattr(local, "_ensure_forkserver", create)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        local._start_server()
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert blocked_in_child == [True]
    assert seen == [signal.SIGINT]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # the mask is restored


@pytest.mark.parametrize("when", ["starting", "reading"])
def test_ctrl_c_before_the_run_exists_ends_the_command_at_once(tmp_path: Path, when: str) -> None:
    """Ctrl-C while the command starts (imports) or reads a large CSV: exit 130 at once, nothing made, nothing
    left. Before, a Ctrl-C during the read waited for the whole file (plus a 3 s grace)."""
    import psutil

    path = tmp_path / "big.csv"
    _big_csv(path, 1500)  # 1.5 M rows, 100 MB: seconds to read, in blocks of a few MB
    proc = start_core(
        "train",
        "--epochs",
        "5",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--set",
        f"data.source=csv:{path}",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=core_env(),
    )
    try:
        if when == "starting":
            time.sleep(0.2)
        else:  # once the command is reading the file
            deadline = time.monotonic() + 60
            reading = False
            while time.monotonic() < deadline and proc.poll() is None and not reading:
                try:
                    reading = any(f.path == str(path) for f in psutil.Process(proc.pid).open_files())
                except psutil.Error:
                    pass
                time.sleep(0.01)
            assert reading, "the command never read the file"
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole group
        sent = time.monotonic()
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert took < 2.5, f"took {took:.1f} s to exit"  # well under 1 s on a quiet machine (docs/RELIABILITY.md)
    assert "Traceback" not in err
    runs = tmp_path / "runs"
    assert not (runs.is_dir() and [p for p in runs.iterdir() if p.is_dir()]), "a run directory was made"
    assert _group_gone(proc.pid, 2.0), "a process of the command is still running"


def test_a_second_ctrl_c_ends_the_workers_at_once_and_still_writes_the_summary(tmp_path: Path) -> None:
    model = tmp_path / "slow.py"
    model.write_text(
        "import math, time\n"
        "from torch import nn\n"
        "class Slow(nn.Module):\n"
        "    def __init__(self, shape, classes):\n"
        "        super().__init__()\n"
        "        self.lin = nn.Linear(math.prod(shape), classes)\n"
        "        self.n = 0\n"
        "    def forward(self, x):\n"
        "        self.n += 1\n"
        "        if self.training and self.n > 3:\n"
        "            time.sleep(60)  # a batch that takes a minute: a first Ctrl-C waits for it\n"
        "        return self.lin(x.flatten(1))\n"
        "def make(shape, classes):\n"
        "    return Slow(shape, classes)\n"
    )
    proc = start_core(
        "train",
        "--epochs",
        "10",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--set",
        f"model.kind=custom:{model}:make",
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=core_env(),
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = list((tmp_path / "runs").glob("*/metrics.jsonl"))
            if found and '"kind":"step"' in found[0].read_text():
                break
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(1.0)  # the first stop waits for the minute-long batch
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted again" in err and took < 15, (took, err)
    run_dir = Path(out.strip().splitlines()[-1])
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "stopped"
    assert _group_gone(proc.pid, 10)
