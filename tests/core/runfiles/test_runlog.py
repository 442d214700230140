"""core.runfiles.writing's atomic writes: whole files or nothing, with the mode a plain open() gives."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

import pytest

from core.runfiles.writing import atomic_write, atomic_write_text


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "summary.json", "{}\n")
        with open(tmp_path / "plain.txt", "w") as fh:
            fh.write("x")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "summary.json").stat().st_mode)
    assert mode == 0o666 & ~umask == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "config.toml"
    target.write_text("old\n")

    def fail(fh: IO[bytes]) -> None:
        fh.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, fail)
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]
    atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_fork_names_do_not_nest_the_parents_time_stamp() -> None:
    from core.runfiles.writing import fork_name, run_label

    assert run_label("20261201-201410-hogwild-mlp") == "hogwild-mlp"
    assert fork_name("20261201-201410-hogwild-mlp") == "hogwild-mlp-fork"
    assert fork_name("20261201-201424-hogwild-mlp-fork") == "hogwild-mlp-fork"  # a fork of a fork
    assert fork_name("my-run") == "my-run-fork"
