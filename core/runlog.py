"""The run directory: atomic writes, the append-only metrics log, summaries."""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, IO, Iterable, Iterator

from core.errors import RunError


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


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write through ``write(fh)`` to a temp file beside ``path``, fsync, then rename.

    Readers see the old file or the new one, never a half-written one; on any
    error the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def make_run_dir(runs_dir: Path, name: str) -> Path:
    """Create ``runs_dir/<YYYYmmdd-HHMMSS>-<name>`` (a numeric suffix if taken)."""
    runs_dir = Path(runs_dir)
    safe = _UNSAFE.sub("-", name).strip("-.") or "run"
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"runs: cannot create runs directory {runs_dir}: {exc.strerror}") from None
    if not os.access(runs_dir, os.W_OK | os.X_OK):
        raise RunError(f"runs: runs directory {runs_dir} is not writable")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        candidate = runs_dir / (f"{stamp}-{safe}" + (f"-{n}" if n else ""))
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunError(f"runs: cannot create run directory {candidate}: {exc.strerror}") from None
        (candidate / "checkpoints").mkdir()
        (candidate / "exports").mkdir()
        return candidate
    raise RunError(f"runs: too many runs named {safe} in {runs_dir} this second")


class MetricsLog:
    """Append-only JSON-lines writer for metrics.jsonl."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = path.open("a", encoding="utf-8")

    def write(self, records: Iterable[dict[str, Any]]) -> None:
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


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def list_runs(runs_dir: Path) -> list[tuple[Path, dict[str, Any] | None]]:
    """Run directories (newest first) with their summaries (None while running or lost)."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    dirs = [p for p in runs_dir.iterdir() if p.is_dir() and (p / "config.toml").exists()]
    dirs.sort(key=lambda p: p.name, reverse=True)
    return [(d, read_summary(d)) for d in dirs]
