"""The run directory: atomic writes, the append-only metrics log, summaries."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from core.errors import RunError

# Session states (the "state" records with worker null); runlog is torch-free, so the window imports them here.
ACTIVE_STATES = ("starting", "running", "paused", "stopping", "finishing")
END_STATES = ("finished", "stopped", "failed")


SUMMARY_FILE = "summary.json"  # in a run directory (core.runfiles.layout); read and written only here


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write through ``write(fh)`` to a temp file beside ``path``, fsync, then rename.

    Readers see the old file or the new one, never a half-written one; on any
    error the temp file is removed and ``path`` is untouched. The file gets the
    mode a plain ``open(path, "w")`` gives (0666 less the umask), not mkstemp's
    0600: run folders are shared with other users of a cluster.
    """
    path = Path(path)
    fd, tmp = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def _create_temp(path: Path) -> tuple[int, str]:
    """A new file beside ``path``, created 0666 so that the kernel applies the umask (and default ACLs)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


_STAMPED = re.compile(r"^\d{8}-\d{6}-")


def run_label(folder_name: str) -> str:
    """A run folder's name without the time stamp ``make_run_dir`` put in front of it."""
    return _STAMPED.sub("", folder_name) or folder_name


def fork_name(parent_folder: str) -> str:
    """The name of a fork of ``parent_folder``: its label once, marked as a fork (a fork of a fork too)."""
    label = run_label(parent_folder)
    while label.endswith("-fork"):
        label = label[: -len("-fork")]
    return f"{label or 'run'}-fork"


def make_run_dir(runs_dir: Path, name: str, started: float | None = None, model_dirs: bool = True) -> Path:
    """Create ``runs_dir/<YYYYmmdd-HHMMSS>-<name>`` (a numeric suffix if taken), stamped now or at ``started``
    (unix seconds: an imported run's start); with ``checkpoints/`` and ``exports/`` unless ``model_dirs`` is
    false (a run without a model)."""
    runs_dir = Path(runs_dir)
    safe = _UNSAFE.sub("-", name).strip("-.") or "run"
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"runs: cannot create runs directory {runs_dir}: {exc.strerror}") from None
    if not os.access(runs_dir, os.W_OK | os.X_OK):
        raise RunError(f"runs: runs directory {runs_dir} is not writable")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    for n in range(1000):
        candidate = runs_dir / (f"{stamp}-{safe}" + (f"-{n}" if n else ""))
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunError(f"runs: cannot create run directory {candidate}: {exc.strerror}") from None
        if model_dirs:
            (candidate / "checkpoints").mkdir()
            (candidate / "exports").mkdir()
        return candidate
    raise RunError(f"runs: too many runs named {safe} in {runs_dir} this second")


class RunsLock:
    """One active run per runs directory: a second is refused, never interleaved.

    An advisory ``flock`` on ``runs_dir/.active``; the kernel drops it if the
    holder dies, so a crash never leaves the directory locked.
    """

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, runs_dir: Path, name: str) -> RunsLock:
        runs_dir = Path(runs_dir)
        try:
            runs_dir.mkdir(parents=True, exist_ok=True)
            fd, holder = hold_lock(runs_dir / ".active", f"pid {os.getpid()}, run {name}")
        except OSError as exc:
            raise RunError(f"runs: cannot use runs directory {runs_dir}: {exc.strerror}") from None
        if fd is None:
            raise RunError(
                f"runs: another run is active in {runs_dir} ({holder or 'another process'}); wait for it to end or "
                "use another runs directory"
            )
        return cls(fd, runs_dir / ".active")

    def name_run(self, name: str) -> None:
        """Say which run holds the lock (its directory's name, once it exists)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"pid {os.getpid()}, run {name}".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            release_lock(self._fd)
            self._fd = None


def hold_lock(path: Path, holder: str) -> tuple[int | None, str]:
    """Hold an advisory ``flock`` on ``path`` (created if need be) and write ``holder`` (who holds it) into
    it: (its descriptor, ""), or (None, what the file says of the process that holds it). The kernel drops
    the lock when its process dies. OSError when the file cannot be opened."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        held_by = lock_holder(fd)
        os.close(fd)
        return None, held_by
    os.ftruncate(fd, 0)
    os.pwrite(fd, holder.encode(), 0)
    return fd, ""


def lock_holder(fd: int) -> str:
    """What a lock file (``hold_lock``) says of the process that holds it ("" before it said)."""
    return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()


def release_lock(fd: int) -> None:
    """Let go of a lock ``hold_lock`` took, its file emptied."""
    import fcntl

    try:
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


MIN_FREE_BYTES = 20 * 1024 * 1024


def check_free_space(runs_dir: Path, parameters: int, workers: int) -> None:
    """Refuse to start when the runs directory cannot hold a checkpoint or two."""
    # weights + one optimizer state per worker, twice (the temp file beside the old one)
    need = max(MIN_FREE_BYTES, 2 * 4 * parameters * (1 + 2 * workers) + MIN_FREE_BYTES)
    try:
        free = shutil.disk_usage(runs_dir).free
    except OSError:
        return
    if free < need:
        raise RunError(
            f"runs: only {free / 2**20:.0f} MiB free in {runs_dir}; a run of this model needs about "
            f"{need / 2**20:.0f} MiB for checkpoints"
        )
    if not os.access(runs_dir, os.W_OK | os.X_OK):
        raise RunError(f"runs: runs directory {runs_dir} is not writable")


class MetricsLog:
    """Append-only JSON-lines writer for metrics.jsonl."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = path.open("a", encoding="utf-8")

    def write(self, records: Iterable[dict[str, Any]]) -> None:
        if self._fh.closed:  # the run has ended; late records have nowhere to go
            return
        self._fh.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            try:
                os.fsync(self._fh.fileno())
            except OSError:
                pass
            self._fh.close()


def read_metrics(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a metrics.jsonl; a torn last line (crash mid-write) is skipped."""
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


class MetricsTail:
    """Reads a growing metrics.jsonl incrementally: each ``read()`` returns the records added since.

    A line still being written (no newline yet) waits for the next read.
    """

    def __init__(self, path: Path, start_at_end: bool = False) -> None:
        self.path = Path(path)
        self.offset = 0
        self._partial = b""
        if start_at_end:
            try:
                self.offset = self.path.stat().st_size
            except OSError:
                pass

    def read(self, max_bytes: int = 1 << 24) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(max_bytes)
        except OSError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # b"" after a complete line
        out = []
        for line in lines:
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """summary.json, whole and atomically: the only writer of that file."""
    atomic_write_json(Path(run_dir) / SUMMARY_FILE, summary)


def update_summary(run_dir: Path, changes: dict[str, Any]) -> dict[str, Any] | None:
    """Merge ``changes`` into an existing summary.json (atomically); the new summary, None if there is none."""
    summary = read_summary(run_dir)
    if summary is None:
        return None
    summary.update(changes)
    write_summary(run_dir, summary)
    return summary
