"""A run mirrored to MLflow: its config as params, its records as metrics by step, tags, and its files at the end.

The run's own folder stays the source of truth; the mirror reads ``metrics.jsonl`` from where it last got to
and sends what the tracking server (or store) has not had, in batches (``log_batch``, at most ``BATCH`` metrics
a request). How far it got is kept in the run's ``mlflow.json``, per tracking URI: the MLflow run's id, the byte
offset of the first record not sent, each series' last step. It is written after every batch the server took.
A batch sent again (its answer was lost) carries the same keys, steps, timestamps and values, which MLflow's
stores keep once; a run mirrored again finds its MLflow run by the ``traindesk.run`` tag, so nothing is sent
twice.

What goes where:

- params: the config's keys, flattened ("optim.lr"), sent once (MLflow's params never change; a continued run's
  later config is its ``config.toml`` artifact);
- metrics: ``loss/worker0`` and ``lr/worker0`` by step, every ``val_*`` figure of an evaluation at the worker's
  step then (a search's series are its trials', ``loss/trial3``); at the end ``final/*``, ``best/*`` and the
  run's ``samples_per_s``, ``train_s`` and ``wall_s``;
- tags: ``traindesk.run`` (the folder's name), the strategy, workers, dataset, ``mlflow.runName``, and the parent
  of a fork (``traindesk.parent``, and ``mlflow.parentRunId`` when the parent is mirrored to the same URI);
- artifacts, at the end: config.toml, summary.json, eval.json and the exports (each with its model.json).

Every failure is a :class:`MirrorError` of one line; the caller decides (the live mirror retries, the command
line reports). MLflow itself is imported only here and only when a run is mirrored.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.config.toml_text import tomllib
from core.runfiles.layout import RunDir
from core.runfiles.records import EVAL, STEP, Record
from core.runfiles.tensorboard_log import flatten, series
from core.runfiles.writing import atomic_write_json

EXPERIMENT = "traindesk"  # the MLflow experiment runs go to (MLFLOW_EXPERIMENT_NAME chooses another)
BATCH = 1000  # metrics a log_batch request carries (MLflow's limit)
PARAMS_BATCH = 100  # params a request carries (MLflow's limit)
PARAM_CHARS = 6000  # the longest param value MLflow keeps
READ_BYTES = 1 << 22  # metrics.jsonl read at most this much at a time
RUN_TAG = "traindesk.run"
STATUS = {"finished": "FINISHED", "stopped": "KILLED", "failed": "FAILED"}
INSTALL = "tracking.mlflow needs MLflow's client: pip install 'traindesk[mlflow]' (or mlflow-skinny)"
REQUEST_S = 10.0  # the longest one request waits for an answer (less when the caller's deadline is nearer)


# what a server that is not there looks like in MLflow's errors, and what to say of it
UNREACHABLE = (
    ("Connection refused", "connection refused"),
    ("Failed to establish a new connection", "no connection"),
    ("Connection aborted", "the connection broke"),
    ("RemoteDisconnected", "the connection broke"),
    ("Connection reset", "the connection broke"),
    ("timed out", "timed out"),
    ("Name or service not known", "unknown host"),
    ("Max retries exceeded", "no connection"),
)


class MirrorError(Exception):
    """The mirror could not send (the server is down, refused a request, MLflow is missing): one line."""


@dataclass
class Mirrored:
    """How far a run was mirrored to one tracking URI (an entry of ``mlflow.json``)."""

    uri: str
    run_id: str = ""
    experiment_id: str = ""
    offset: int = 0  # bytes of metrics.jsonl sent
    steps: dict[str, int] = field(default_factory=dict)  # each series' last step, for the evaluations after it
    last_t: float = 0.0  # the newest record's time: the end's metrics are stamped with it (the same when resent)
    params: bool = False
    ended: str = ""  # the MLflow status sent at the end ("" while the run goes on or is not complete there)

    @property
    def link(self) -> str:
        """The run's page in the MLflow UI (an http(s) server), else ""."""
        if not self.run_id or not self.uri.startswith(("http://", "https://")):
            return ""
        return f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"


def read_mirrors(run_dir: Path | str) -> dict[str, Mirrored]:
    """Where a run is mirrored (``mlflow.json``), by tracking URI; empty when nowhere (or the file is unreadable)."""
    try:
        data = json.loads(RunDir(run_dir).mlflow.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for uri, entry in (data.get("mirrors") or {}).items() if isinstance(data, dict) else ():
        try:
            out[uri] = Mirrored(**{**entry, "uri": uri})
        except TypeError:
            continue
    return out


def _write_mirror(run_dir: Path, entry: Mirrored) -> None:
    mirrors = read_mirrors(run_dir)
    mirrors[entry.uri] = entry
    atomic_write_json(RunDir(run_dir).mlflow, {"mirrors": {u: asdict(m) for u, m in mirrors.items()}})


def metrics_of(record: Record, steps: dict[str, int]) -> Iterator[tuple[str, float, int, int]]:
    """The (key, value, timestamp in ms, step) points of a step or evaluation record; ``steps`` follows each
    series' step. Values that are not finite numbers (a diverged loss) are left out."""
    kind = record.get("kind")
    if kind not in (STEP, EVAL) or "worker" not in record:
        return
    name = series(record)
    t = int(float(record.get("t", 0)) * 1000)
    if kind == STEP:
        step = steps[name] = int(record["step"])
        values = {"loss": record.get("loss"), "lr": record.get("lr")}
    else:
        step = steps.get(name, 0)
        values = {k: v for k, v in record.items() if k.startswith("val_")}
    for key, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            yield f"{key}/{name}", float(value), t, step


def read_lines(path: Path, offset: int, max_bytes: int = READ_BYTES) -> tuple[list[Record], int]:
    """The whole records of ``path`` from byte ``offset`` (a line being written waits) and the offset after them."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            chunk = fh.read(max_bytes)
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    out = []
    for line in chunk[:end].splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn line of a crash
        if isinstance(rec, dict):
            out.append(rec)
    return out, offset + end


def pending_bytes(run_dir: Path | str, uri: str) -> int:
    """How much of the run's metrics.jsonl has not reached ``uri``."""
    entry = read_mirrors(run_dir).get(uri)
    try:
        size = RunDir(run_dir).metrics.stat().st_size
    except OSError:
        return 0
    return max(0, size - (entry.offset if entry else 0))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    reason = text[0] if text else ""
    if len(reason) > 200:
        reason = reason[:197] + "..."
    return f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__


_SETTINGS = threading.Lock()  # MLflow reads its HTTP settings from the environment: one call sets them at a time


@contextlib.contextmanager
def _http_settings(timeout: float) -> Iterator[None]:
    """MLflow's HTTP client retries a refused connection for minutes by default; the mirror retries on its own
    schedule, so one attempt a call, answered within ``timeout`` (unless the user set these). They are set for
    the call alone and put back after it: the rest of the process keeps its own environment."""
    wanted = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, math.ceil(timeout))),
        "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # stdout's last line is the run's folder
    }
    with _SETTINGS:
        before = {k: os.environ.get(k) for k in wanted}
        for key, value in wanted.items():
            if before[key] is None:
                os.environ[key] = value
        try:
            yield
        finally:
            for key, old in before.items():
                if old is None:
                    os.environ.pop(key, None)


def _unreachable(exc: BaseException) -> str | None:
    """Why the server did not answer, from the errors' types along the chain (their texts where a library
    wraps them into its own error), or None when it answered with an error."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError) or type(seen).__name__ in ("Timeout", "ReadTimeout", "ConnectTimeout"):
            return "timed out"
        if isinstance(seen, ConnectionError) or type(seen).__name__ in ("ConnectionError", "NewConnectionError"):
            return "no connection"
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    return next((reason for words, reason in UNREACHABLE if words in text), None)


@contextlib.contextmanager
def _mirror_lock(run: RunDir, uri: str, deadline: float) -> Iterator[None]:
    """The run's mirror to MLflow, one process at a time (a live mirror and Mirror to MLflow on the same run):
    mlflow.json has one writer and no record is sent twice. Waits until ``deadline`` (monotonic)."""
    path = run.mlflow_lock
    try:
        fh = path.open("a+")
    except OSError:  # a read-only run: nothing is written to it either
        yield
        return
    with fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise MirrorError(
                        f"mlflow: another process is mirroring {run.name} to {uri} now; it goes on from where that "
                        "one gets to"
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class MlflowMirror:
    """Mirrors one run directory to one tracking URI, from where it last got to."""

    def __init__(self, run_dir: Path | str, uri: str, parent: dict[str, Any] | None = None) -> None:
        self.run = RunDir(run_dir)
        self.uri = uri
        self.parent = parent
        self._client: Any = None
        self._checked = False  # the run mlflow.json names was found there
        self.entry = read_mirrors(self.run.path).get(uri) or Mirrored(uri)
        self._deadline = math.inf  # monotonic: no call of this sync starts, or waits, past it

    # ---- the client -------------------------------------------------------------------------------
    def client(self) -> Any:
        if self._client is None:
            try:
                from mlflow.tracking import MlflowClient
            except ImportError as exc:
                raise MirrorError(INSTALL) from exc
            for name in ("mlflow.store.db.utils", "alembic"):  # a new local store's set-up is no news
                logging.getLogger(name).setLevel(logging.WARNING)
            try:
                with _http_settings(REQUEST_S):
                    self._client = MlflowClient(tracking_uri=self.uri)
            except Exception as exc:
                raise MirrorError(f"mlflow: {self.uri} is not a tracking URI MLflow takes: {_one_line(exc)}") from exc
        return self._client

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise MirrorError(f"mlflow: {self.uri} did not take the rest in time (it was to {what}); it is sent later")
        try:
            with _http_settings(min(REQUEST_S, left)):
                return fn(*args, **kwargs)
        except MirrorError:
            raise
        except Exception as exc:
            reason = _unreachable(exc)
            if reason is not None:
                raise MirrorError(f"mlflow: {self.uri} does not answer ({reason})") from exc
            raise MirrorError(f"mlflow: cannot {what} at {self.uri}: {_one_line(exc)}") from exc

    # ---- what is sent -----------------------------------------------------------------------------
    def sync(self, final: bool = False, timeout: float | None = None) -> int:
        """Send what has not been sent (and, ``final``, the run's end and its files); the metrics sent. With
        ``timeout`` (seconds), no request starts or waits past it: what is left stays for the next sync."""
        self._deadline = math.inf if timeout is None else time.monotonic() + timeout
        try:
            with _mirror_lock(self.run, self.uri, self._deadline if timeout is not None else time.monotonic() + 60):
                latest = read_mirrors(self.run.path).get(self.uri)
                if latest is not None and latest.offset > self.entry.offset:  # another process got further
                    self.entry = latest
                self._ensure_run()
                sent = self._send_records()
                if final:
                    self._send_end()
                return sent
        finally:
            self._deadline = math.inf

    def _save(self) -> None:
        _write_mirror(self.run.path, self.entry)

    def _config(self) -> dict[str, Any]:
        try:
            return tomllib.loads(self.run.config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def _ensure_run(self) -> None:
        client, entry = self.client(), self.entry
        if entry.run_id and not self._checked:
            self._checked = True
            if not self._still_there(entry.run_id):  # the store was replaced or the run deleted: start over
                entry = self.entry = Mirrored(self.uri)
        if entry.run_id:
            return
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        found = self._call("read the experiment", client.get_experiment_by_name, experiment)
        if found is not None:
            entry.experiment_id = found.experiment_id
        else:
            entry.experiment_id = self._call(
                "create the experiment", client.create_experiment, experiment, artifact_location=self._artifacts_at()
            )
        runs = self._call(
            "look for the run",
            client.search_runs,
            [entry.experiment_id],
            filter_string=f"tags.`{RUN_TAG}` = '{self.run.name}'",
            max_results=1,
        )
        if runs:
            entry.run_id = runs[0].info.run_id  # mirrored before, its mlflow.json lost: go on where the server is
            self._resume_from_server(runs[0])
        else:
            run = self._call("create the run", client.create_run, entry.experiment_id, tags=self._tags())
            entry.run_id = run.info.run_id
        self._save()

    def _still_there(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            run = self.client().get_run(run_id)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return False
            return bool(self._call("read the run", self.client().get_run, run_id))  # its own one-line error
        return run.info.lifecycle_stage == "active"

    def _resume_from_server(self, run: Any) -> None:
        """A run found on the server without a record of what it got: everything is sent again (the stores keep
        a metric once), the params only if it has none."""
        self.entry.params = bool(run.data.params)

    def _artifacts_at(self) -> str | None:
        """A local store (sqlite:///PATH) keeps artifacts beside its database (``mlartifacts/``); a server decides."""
        if not self.uri.startswith("sqlite:///"):
            return None
        db = Path(self.uri[len("sqlite:///") :])
        return (db.resolve().parent / "mlartifacts").as_uri()

    def _tags(self) -> dict[str, str]:
        cfg = self._config()
        summary = self.run.read_summary() or {}
        parallel, data = cfg.get("parallel", {}), cfg.get("data", {})
        tags = {
            RUN_TAG: self.run.name,
            "traindesk.run_dir": str(self.run.path.resolve()),
            "traindesk.strategy": str(parallel.get("strategy", "")),
            "traindesk.workers": str(parallel.get("workers", "")),
            "traindesk.dataset": str(summary.get("dataset") or data.get("source", "")),
            "mlflow.runName": _display_name(self.run),
            "mlflow.source.name": "traindesk",
        }
        parent = self.parent or summary.get("parent")
        if isinstance(parent, dict) and parent.get("run"):
            tags["traindesk.parent"] = Path(str(parent["run"])).name
            parent_id = read_mirrors(parent["run"]).get(self.uri)
            if parent_id is not None and parent_id.run_id:
                tags["mlflow.parentRunId"] = parent_id.run_id
        return {k: v for k, v in tags.items() if v}

    def _params(self) -> list[Any]:
        from mlflow.entities import Param

        flat = flatten(self._config())
        return [Param(k[:250], str(v)[:PARAM_CHARS]) for k, v in flat.items()]

    def _send_records(self) -> int:
        from mlflow.entities import Metric

        client, entry = self.client(), self.entry
        if not entry.params:
            params = self._params()
            for i in range(0, len(params), PARAMS_BATCH):
                self._call("log the params", client.log_batch, entry.run_id, params=params[i : i + PARAMS_BATCH])
            entry.params = True
            self._save()
        sent = 0
        while True:
            records, offset = read_lines(self.run.metrics, entry.offset)
            if offset == entry.offset:
                return sent
            steps = dict(entry.steps)
            points: list[Any] = []
            last_t = entry.last_t
            for rec in records:
                last_t = max(last_t, float(rec.get("t", 0) or 0))
                points.extend(Metric(k, v, t, s) for k, v, t, s in metrics_of(rec, steps))
            for i in range(0, len(points), BATCH):
                self._call("log metrics", client.log_batch, entry.run_id, metrics=points[i : i + BATCH])
            # a chunk's batches all reached the server: only then does the ledger move past it
            entry.offset, entry.steps, entry.last_t = offset, steps, last_t
            sent += len(points)
            self._save()

    def _send_end(self) -> None:
        """The run's end: its figures, its files and its status (nothing while it goes on elsewhere)."""
        from mlflow.entities import Metric

        client, entry = self.client(), self.entry
        summary = self.run.read_summary()
        if summary is None or summary.get("status") not in STATUS:
            return
        step, t = max(entry.steps.values(), default=0), int(entry.last_t * 1000)
        figures: dict[str, Any] = {f"final/{k}": v for k, v in (summary.get("final") or {}).items()}
        best = summary.get("best")
        if isinstance(best, dict) and best.get("monitor"):
            figures[f"best/{best['monitor']}"] = best.get("value")
        figures.update({k: summary.get(k) for k in ("samples_per_s", "train_s", "wall_s")})
        points = [
            Metric(k, float(v), t, step)
            for k, v in figures.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ]
        if points:
            self._call("log the run's end", client.log_batch, entry.run_id, metrics=points)
        for path in (self.run.config, self.run.summary, self.run.evaluation):
            if path.is_file():
                self._call(f"upload {path.name}", client.log_artifact, entry.run_id, str(path))
        if self.run.exports.is_dir() and any(self.run.exports.iterdir()):
            self._call("upload the exports", client.log_artifacts, entry.run_id, str(self.run.exports), "exports")
        status = STATUS[summary["status"]]
        self._call("end the run", client.set_terminated, entry.run_id, status)
        entry.ended = status
        self._save()

    def reopen(self) -> None:
        """A continued run trains again: its MLflow run is running again (when it was mirrored and ended)."""
        entry = self.entry
        if entry.run_id and entry.ended:
            self._call("mark the run running", self.client().update_run, entry.run_id, status="RUNNING")
            entry.ended = ""
            self._save()


def _display_name(run: RunDir) -> str:
    try:
        notes = json.loads(run.notes.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return run.name
    return str(notes.get("name") or run.name) if isinstance(notes, dict) else run.name
