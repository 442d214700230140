"""Where runs are mirrored, for the faces: MLflow (a past run sent, where each run went) and the URI a run uses.

A live run with a tracking URI mirrors itself (the session's recorder); :func:`mirror_run` sends a past run, or
what a live or interrupted one has not sent, from where its ``mlflow.json`` says it got to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.config import FIELDS, Config, ConfigError
from core.config.fields import check_tracking_uri
from core.runfiles.control_file import active_run_pid
from core.tracking.live_mirror import mlflow_uri
from core.tracking.mlflow_mirror import INSTALL, Mirrored, MirrorError, MlflowMirror, read_mirrors

__all__ = ["MirrorError", "MirrorResult", "Mirrored", "check_uri", "mirror_run", "read_mirrors", "uri_of"]


@dataclass(frozen=True)
class MirrorResult:
    run: Path
    sent: int  # metrics sent now (0: it had them all)
    entry: Mirrored
    live: bool  # another process runs it: its end is sent by that process


def check_uri(uri: str, name: str = "--to-mlflow") -> str:
    """``uri`` checked as ``tracking.mlflow`` is, with MLflow's client installed; ConfigError (one line) if not.

    ``name`` is what the message calls the URI: the option, or the window's setting."""
    import importlib.util

    try:
        uri = check_tracking_uri(FIELDS["tracking.mlflow"], uri)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("config: tracking.mlflow", name, 1)) from None
    if not uri:
        raise ConfigError(f"{name}: a tracking URI is needed (http://HOST:PORT, sqlite:///PATH, ...)")
    if importlib.util.find_spec("mlflow") is None:
        raise ConfigError(INSTALL)
    return uri


def mirror_run(run_dir: Path | str, uri: str) -> MirrorResult:
    """Send ``run_dir`` to ``uri``: what it has not had, and the end of a run that ended. MirrorError if not."""
    run_dir = Path(run_dir)
    live = active_run_pid(run_dir) is not None
    mirror = MlflowMirror(run_dir, uri)
    sent = mirror.sync(final=not live)
    return MirrorResult(run_dir, sent, mirror.entry, live)


def uri_of(config: Config) -> str:
    """The URI a run of ``config`` is mirrored to ("" for none); ConfigError when it cannot be."""
    return mlflow_uri(config)
