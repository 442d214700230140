"""Run configuration: frozen dataclasses, TOML load/save, one place of validation.

Every key has a default; unknown keys and wrong types are rejected with a
one-line :class:`ConfigError` that names the key, e.g.
``config: parallel.workers must be an integer from 1 to 256, got "two"``.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from core.errors import ConfigError as ConfigError  # defined with the other input errors; importable here too
from core.metric_names import MAXIMIZED as MAXIMIZED, METRICS  # noqa: F401 - MAXIMIZED is read from here too
from core.strategies.registry import NAMES as STRATEGIES

OPTIMIZERS = ("sgd", "adam", "adamw")
ACTIVATIONS = ("relu", "gelu", "tanh", "silu")
MODEL_KINDS = ("linear", "mlp", "cnn")
DATA_SCHEMES = ("builtin", "csv", "parquet", "npz", "images")
SCHEDULES = ("constant", "step", "cosine", "one-cycle", "plateau")
MONITORED = ("val_loss", "val_accuracy")
COLUMN_KINDS = ("number", "category", "bool", "ignore")
TASKS = ("auto", "classification", "regression")
CLASS_WEIGHTS = ("none", "balanced")
REGRESSION_LOSSES = ("mse", "huber")
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "asha", "none")
# what a search may vary: the run's shape (data, workers) stays
SEARCHABLE_SECTIONS = ("model", "optim", "train", "schedule", "augment")


class Bounds(NamedTuple):
    """The range of a numeric key (of each item, for a list); the window's widgets take it too."""

    lo: float
    hi: float
    lo_open: bool = False  # lo itself is not allowed (a learning rate above 0)


def _bounded(default: Any, lo: float, hi: float, lo_open: bool = False) -> Any:
    return field(default=default, metadata={"bounds": Bounds(lo, hi, lo_open)})


LR = Bounds(0.0, 100.0, lo_open=True)


@dataclass(frozen=True)
class DataConfig:
    source: str = "builtin:digits"
    target: str = "label"
    val_fraction: float = _bounded(0.2, 0.0, 0.9)
    loader_workers: int = _bounded(0, 0, 64)
    image_size: int = _bounded(0, 0, 1024)  # images only: resize to SIZExSIZE; 0 = the first image's size
    standardize: bool = True
    # tables (csv:, parquet:): kinds that override the inferred ones, as (column, kind) pairs
    columns: tuple[tuple[str, str], ...] = ()
    missing: tuple[str, ...] = ("", "NA", "NaN", "null", "?")  # cells that mean "no value"


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "mlp"
    hidden: tuple[int, ...] = _bounded((256, 256), 1, 65536)
    activation: str = "relu"
    dropout: float = _bounded(0.0, 0.0, 0.95)
    channels: tuple[int, ...] = _bounded((16, 32), 1, 4096)  # cnn only


@dataclass(frozen=True)
class OptimConfig:
    name: str = "sgd"
    lr: float = _bounded(0.05, *LR)
    momentum: float = _bounded(0.9, 0.0, 0.999)
    weight_decay: float = _bounded(0.0, 0.0, 10.0)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = _bounded(10, 1, 100000)
    batch_size: int = _bounded(64, 1, 1 << 20)
    seed: int = _bounded(0, 0, 2**31 - 1)
    # seconds between consistent checkpoints while training; 0 = only at the end
    checkpoint_every: float = _bounded(30.0, 0.0, 86400.0)
    monitor: str = "val_loss"  # what "best" means: best.pt, early stopping
    early_stop_patience: int = _bounded(0, 0, 100000)  # epochs without improvement before stopping; 0 = never
    early_stop_min_delta: float = _bounded(0.0, 0.0, 1e9)  # smaller changes are no improvement
    task: str = "auto"             # auto | classification | regression (tables)
    class_weights: str = "none"    # none | balanced: inverse-frequency weights in the loss
    select_by: str = "auto"        # the metric that picks best.pt and stops early; auto: monitor, val_rmse for regression
    loss: str = "mse"              # regression: mse | huber (on the standardised target)


@dataclass(frozen=True)
class ParallelConfig:
    strategy: str = "hogwild"
    workers: int = _bounded(2, 1, 256)
    threads_per_worker: int = _bounded(0, 0, 1024)
    device: str = "cpu"
    sweep_lr: tuple[float, ...] = _bounded((), *LR)
    # seconds without records (not paused) before a worker is reported stalled; 0 = never
    stall_timeout: float = _bounded(120.0, 0.0, 86400.0)
    precision: str = "32"  # 32 | bf16-mixed | 16-mixed (CUDA): autocast in the training step


@dataclass(frozen=True)
class ScheduleConfig:
    """The learning rate as a function of the run's progress; optim.lr is its base (peak)."""

    kind: str = "constant"
    warmup_steps: int = _bounded(0, 0, 10**9)       # linear warm-up from 0 over this many steps
    min_lr: float = _bounded(0.0, 0.0, 100.0)       # cosine, one-cycle: the lr at the last step
    step_epochs: int = _bounded(10, 1, 100000)      # step: multiply by gamma every this many epochs
    gamma: float = _bounded(0.1, 0.0, 1.0, lo_open=True)  # step, plateau: the factor
    pct_start: float = _bounded(0.3, 0.0, 1.0)      # one-cycle: fraction of the run spent rising
    patience: int = _bounded(2, 0, 10000)           # plateau: evaluations without improvement


@dataclass(frozen=True)
class AugmentConfig:
    """Random changes to training images (never to validation); every default is off."""

    crop_scale: float = _bounded(1.0, 0.05, 1.0)  # random resized crop: smallest area kept; 1 = off
    hflip: bool = False                            # random horizontal flip
    rotation: float = _bounded(0.0, 0.0, 180.0)   # random rotation up to this many degrees
    jitter: float = _bounded(0.0, 0.0, 1.0)       # colour jitter: brightness, contrast, saturation


class SearchRange(NamedTuple):
    """A numeric search range of one key."""

    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class SearchConfig:
    """strategy "search": trials sampled by Optuna; ``space`` holds ("section.key", range or choices)."""

    trials: int = _bounded(20, 1, 100000)
    sampler: str = "tpe"
    pruner: str = "median"
    metric: str = "val_accuracy"
    space: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    search: SearchConfig = field(default_factory=SearchConfig)

    def replace(self, section: str, **values: Any) -> "Config":
        """A copy with some keys of one section changed, validated."""
        data = to_dict(self)
        data[section].update(values)
        return from_dict(data)

    def to_toml(self) -> str:
        return to_toml(self)


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "parallel": ParallelConfig,
    "schedule": ScheduleConfig,
    "augment": AugmentConfig,
    "search": SearchConfig,
}

# "section.key" -> its Bounds, as declared on the fields above.
BOUNDS: dict[str, Bounds] = {
    f"{name}.{f.name}": f.metadata["bounds"]
    for name, cls in SECTIONS.items() for f in fields(cls) if "bounds" in f.metadata
}


SHOW_MAX = 80  # characters of a bad value quoted in an error message
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _show(value: Any) -> str:
    """A bad value as one short line: strings quoted and escaped, long values cut."""
    if isinstance(value, str):
        text = json.dumps(value)
    elif isinstance(value, (list, tuple)):
        if len(value) > 8:
            text = "[" + ", ".join(_show(v) for v in value[:8]) + ", ...]"
        else:
            text = "[" + ", ".join(_show(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "a table"
    elif isinstance(value, (datetime.date, datetime.time)):  # TOML dates and times
        text = value.isoformat()
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOW_MAX:
        text = f"an integer of {len(str(abs(value)))} digits"
    else:
        text = repr(value)
    text = " ".join(text.splitlines())
    return text if len(text) <= SHOW_MAX else text[:SHOW_MAX - 3] + "..."


def _key(name: str) -> str:
    """A TOML key as it would be written: bare when it can be, else quoted (one line)."""
    return name if _BARE_KEY.fullmatch(name) else _show(name)


def _fail(key: str, what: str, value: Any) -> ConfigError:
    return ConfigError(f"config: {key} must be {what}, got {_show(value)}")


def _int(key: str, value: Any) -> int:
    lo, hi, _ = BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(key, f"an integer from {lo} to {hi}", value)
    return value


def _float(key: str, value: Any) -> float:
    lo, hi, lo_open = BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(key, "a number", value)
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float range: certainly out of bounds
        number = math.inf if value > 0 else -math.inf
    low_ok = number > lo if lo_open else number >= lo
    if not (math.isfinite(number) and low_ok and number <= hi):
        bound = f"greater than {lo:g}" if lo_open else f"at least {lo:g}"
        raise _fail(key, f"a number {bound} and at most {hi:g}", value)
    return number


def _choice(key: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _fail(key, "one of " + ", ".join(choices), value)
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(key, "true or false", value)
    return value


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(key, "a non-empty string", value)
    return value


def _int_list(key: str, value: Any, allow_empty: bool) -> tuple[int, ...]:
    lo, hi, _ = BOUNDS[key]
    what = f"a list of integers from {lo} to {hi}"
    if not isinstance(value, (list, tuple)) or (not value and not allow_empty):
        raise _fail(key, what, value)
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not lo <= item <= hi:
            raise _fail(key, what, value)
    return tuple(value)


def _check_source(key: str, value: Any) -> str:
    value = _str(key, value)
    scheme, sep, rest = value.partition(":")
    if not sep or scheme not in DATA_SCHEMES or not rest:
        raise _fail(key, "builtin:NAME, csv:PATH, npz:PATH or images:DIR (or parquet:PATH)", value)
    return value


def _check_columns(key: str, value: Any) -> tuple[tuple[str, str], ...]:
    """``{name = kind}`` (or (name, kind) pairs) of column kinds."""
    items = value.items() if isinstance(value, Mapping) else value
    if not isinstance(items, (list, tuple)) and not isinstance(value, Mapping):
        raise _fail(key, "a table {column = kind}", value)
    out = []
    for pair in items:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise _fail(key, "a table {column = kind}", value)
        name, kind = pair
        out.append((name, _choice(f"{key}.{_key(name)}", kind, COLUMN_KINDS)))
    return tuple(out)


def _check_missing(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _fail(key, "a list of strings", value)
    return tuple(v.strip() for v in value)


def _check_model_kind(key: str, value: Any) -> str:
    value = _str(key, value)
    if value.startswith("custom:"):
        path, sep, func = value[len("custom:"):].rpartition(":")
        if not sep or not path or not func.isidentifier():
            raise _fail(key, "custom:PATH.py:FUNCTION", value)
        return value
    return _choice(key, value, MODEL_KINDS + ("custom:PATH.py:FUNCTION",))


def _check_device(key: str, value: Any) -> str:
    value = _str(key, value)
    if value in ("cpu", "cuda", "mps"):
        return value
    if value.startswith("cuda:") and value[5:].isdigit():
        return value
    raise _fail(key, "cpu, cuda, cuda:N or mps", value)


def _check_lrs(key: str, value: Any) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)):
        raise _fail(key, "a list of learning rates", value)
    return tuple(_float(key, v) for v in value)


def _validate(section: str, values: dict[str, Any]) -> dict[str, Any]:
    """Check and normalise one section's values (all keys present)."""
    k = lambda name: f"{section}.{name}"  # noqa: E731 - short key namer
    v = values
    if section == "data":
        v["source"] = _check_source(k("source"), v["source"])
        v["target"] = _str(k("target"), v["target"])
        v["val_fraction"] = _float(k("val_fraction"), v["val_fraction"])
        v["loader_workers"] = _int(k("loader_workers"), v["loader_workers"])
        v["image_size"] = _int(k("image_size"), v["image_size"])
        v["standardize"] = _bool(k("standardize"), v["standardize"])
        v["columns"] = _check_columns(k("columns"), v["columns"])
        v["missing"] = _check_missing(k("missing"), v["missing"])
    elif section == "model":
        v["kind"] = _check_model_kind(k("kind"), v["kind"])
        v["hidden"] = _int_list(k("hidden"), v["hidden"], allow_empty=True)
        v["activation"] = _choice(k("activation"), v["activation"], ACTIVATIONS)
        v["dropout"] = _float(k("dropout"), v["dropout"])
        v["channels"] = _int_list(k("channels"), v["channels"], allow_empty=False)
    elif section == "optim":
        v["name"] = _choice(k("name"), v["name"], OPTIMIZERS)
        v["lr"] = _float(k("lr"), v["lr"])
        v["momentum"] = _float(k("momentum"), v["momentum"])
        v["weight_decay"] = _float(k("weight_decay"), v["weight_decay"])
    elif section == "train":
        v["epochs"] = _int(k("epochs"), v["epochs"])
        v["batch_size"] = _int(k("batch_size"), v["batch_size"])
        v["seed"] = _int(k("seed"), v["seed"])
        v["checkpoint_every"] = _float(k("checkpoint_every"), v["checkpoint_every"])
        v["monitor"] = _choice(k("monitor"), v["monitor"], MONITORED)
        v["early_stop_patience"] = _int(k("early_stop_patience"), v["early_stop_patience"])
        v["early_stop_min_delta"] = _float(k("early_stop_min_delta"), v["early_stop_min_delta"])
        v["task"] = _choice(k("task"), v["task"], TASKS)
        v["class_weights"] = _choice(k("class_weights"), v["class_weights"], CLASS_WEIGHTS)
        v["select_by"] = _choice(k("select_by"), v["select_by"], ("auto",) + METRICS)
        v["loss"] = _choice(k("loss"), v["loss"], REGRESSION_LOSSES)
    elif section == "parallel":
        v["strategy"] = _choice(k("strategy"), v["strategy"], STRATEGIES)
        v["workers"] = _int(k("workers"), v["workers"])
        v["threads_per_worker"] = _int(k("threads_per_worker"), v["threads_per_worker"])
        v["device"] = _check_device(k("device"), v["device"])
        v["sweep_lr"] = _check_lrs(k("sweep_lr"), v["sweep_lr"])
        v["stall_timeout"] = _float(k("stall_timeout"), v["stall_timeout"])
        v["precision"] = _choice(k("precision"), v["precision"], PRECISIONS)
    elif section == "schedule":
        v["kind"] = _choice(k("kind"), v["kind"], SCHEDULES)
        for name in ("warmup_steps", "step_epochs", "patience"):
            v[name] = _int(k(name), v[name])
        for name in ("min_lr", "gamma", "pct_start"):
            v[name] = _float(k(name), v[name])
    elif section == "augment":
        v["crop_scale"] = _float(k("crop_scale"), v["crop_scale"])
        v["hflip"] = _bool(k("hflip"), v["hflip"])
        v["rotation"] = _float(k("rotation"), v["rotation"])
        v["jitter"] = _float(k("jitter"), v["jitter"])
    elif section == "search":
        v["trials"] = _int(k("trials"), v["trials"])
        v["sampler"] = _choice(k("sampler"), v["sampler"], SAMPLERS)
        v["pruner"] = _choice(k("pruner"), v["pruner"], PRUNERS)
        v["metric"] = _choice(k("metric"), v["metric"], METRICS)
        v["space"] = tuple((key, _check_space(key, value)) for key, value in v["space"])
    return v


def _searchable(key: str) -> tuple[str, str, Any]:
    """(section, name, default) of a key a search may vary."""
    section, _, name = key.partition(".")
    cls = SECTIONS.get(section) if section in SEARCHABLE_SECTIONS else None
    names = {f.name for f in fields(cls)} if cls is not None else set()
    if name not in names:
        raise ConfigError(f"config: search key {_show(key)} is not a key a search can vary "
                          f"(keys of [{'], ['.join(SEARCHABLE_SECTIONS)}])")
    return section, name, getattr(cls(), name)


def _check_space(key: str, value: Any) -> Any:
    """A search range ``{low, high, log}`` (SearchRange) or a list of choices (tuple), checked."""
    section, name, default = _searchable(key)
    where = f"search.{_key(key)}"
    if isinstance(value, SearchRange):
        value = value._asdict()
    if isinstance(value, Mapping):
        extra = sorted(set(value) - {"low", "high", "log"})
        if extra or "low" not in value or "high" not in value:
            raise _fail(where, "a list of choices or a table {low, high, log}", value)
        numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
        if not numeric:
            raise _fail(where, f"a list of choices ({key} is not a number)", value)
        check = _int if isinstance(default, int) else _float
        try:
            low, high = check(key, value["low"]), check(key, value["high"])
        except ConfigError as exc:
            raise ConfigError(f"config: {where}: {str(exc).removeprefix('config: ')}") from None
        log = _bool(f"{where}.log", value.get("log", False))
        if not low < high:
            raise _fail(where, "a range with low below high", value)
        if log and low <= 0:
            raise _fail(where, "a range above 0 when log = true", value)
        return SearchRange(low, high, log)
    if not isinstance(value, (list, tuple)) or not value or len(value) > 1000:
        raise _fail(where, "a list of choices (1 to 1000) or a table {low, high, log}", value)
    choices = []
    for choice in value:
        try:
            checked = _validate(section, {**{f.name: getattr(SECTIONS[section](), f.name)
                                             for f in fields(SECTIONS[section])}, name: choice})[name]
        except ConfigError as exc:
            raise ConfigError(f"config: {where}: {str(exc).removeprefix('config: ')}") from None
        choices.append(checked)
    return tuple(choices)


def _cross_check(cfg: Config) -> None:
    p = cfg.parallel
    if p.strategy == "single" and p.workers != 1:
        raise ConfigError(
            f"config: parallel.workers must be 1 for strategy \"single\", got {p.workers}"
        )
    if p.sweep_lr and p.strategy != "sweep":
        raise ConfigError(
            f"config: parallel.sweep_lr is for strategy \"sweep\" only, got strategy {_show(p.strategy)}"
        )
    if p.sweep_lr and len(p.sweep_lr) != p.workers:
        raise ConfigError(
            f"config: parallel.sweep_lr must have one learning rate per worker "
            f"({p.workers}), got {len(p.sweep_lr)}"
        )
    if p.precision == "16-mixed" and not p.device.startswith("cuda"):
        raise ConfigError(f"config: parallel.precision \"16-mixed\" needs a CUDA device (parallel.device = "
                          f"\"cuda\"), got device {_show(p.device)}; use \"bf16-mixed\" on the CPU")
    sch = cfg.schedule
    if sch.kind in ("cosine", "one-cycle") and sch.min_lr >= cfg.optim.lr:
        raise ConfigError(f"config: schedule.min_lr must be below optim.lr ({cfg.optim.lr:g}), got {sch.min_lr:g}")
    search = cfg.search
    if p.strategy == "search" and not search.space:
        raise ConfigError('config: [search] needs at least one key to vary, e.g. '
                          '"optim.lr" = {low = 0.0001, high = 0.3, log = true}')
    if search.sampler == "grid":
        ranged = [key for key, value in search.space if isinstance(value, SearchRange)]
        if ranged:
            raise ConfigError(f"config: search.sampler \"grid\" needs a list of values for every key, "
                              f"got a range for {_show(ranged[0])}")


def _search_values(given: Mapping[str, Any]) -> dict[str, Any]:
    """[search]: its own keys, and "section.key" entries that make up the space."""
    values: dict[str, Any] = {f.name: getattr(SearchConfig(), f.name) for f in fields(SearchConfig)}
    known = {f.name for f in fields(SearchConfig)} - {"space"}
    space = []
    for key, value in given.items():
        if "." in key:
            _searchable(key)
            space.append((key, value))
        elif key in known:
            values[key] = value
        else:
            raise ConfigError(f"config: unknown key search.{_key(key)}; known keys: " + ", ".join(sorted(known))
                              + ', and "section.key" ranges')
    values["space"] = tuple(space)
    return values


def from_dict(raw: Mapping[str, Any]) -> Config:
    """Build a validated Config from a parsed TOML mapping."""
    if not isinstance(raw, Mapping):
        raise ConfigError("config: the top level must be a table")
    for name in raw:
        if name not in SECTIONS:
            raise ConfigError(
                f"config: unknown section [{_key(name)}]; known sections: " + ", ".join(SECTIONS)
            )
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        given = raw.get(name, {})
        if not isinstance(given, Mapping):
            raise ConfigError(f"config: [{name}] must be a table, got {_show(given)}")
        if name == "search":
            sections[name] = cls(**_validate(name, _search_values(given)))
            continue
        known = {f.name for f in fields(cls)}
        for key in given:
            if key not in known:
                raise ConfigError(
                    f"config: unknown key {name}.{_key(key)}; known keys: " + ", ".join(sorted(known))
                )
        values = {f.name: getattr(cls(), f.name) for f in fields(cls)}
        values.update(given)
        if name == "parallel" and values["strategy"] == "single" and "workers" not in given:
            values["workers"] = 1  # "single" means one worker unless the file says otherwise
        sections[name] = cls(**_validate(name, values))
    cfg = Config(**sections)
    _cross_check(cfg)
    return cfg


def _plain(value: Any) -> Any:
    if isinstance(value, SearchRange):
        return value._asdict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_dict(cfg: Config) -> dict[str, dict[str, Any]]:
    """Plain nested dict (lists, not tuples) of every key; [search] ranges as "section.key" entries."""
    out: dict[str, dict[str, Any]] = {}
    for name in SECTIONS:
        section = {f.name: getattr(getattr(cfg, name), f.name) for f in fields(SECTIONS[name])}
        space = section.pop("space", ()) if name == "search" else ()
        out[name] = {k: _plain(v) for k, v in section.items()}
        if name == "data":
            out[name]["columns"] = {k: v for k, v in section["columns"]}
        out[name].update((key, _plain(value)) for key, value in space)
    return out


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def to_toml(cfg: Config) -> str:
    lines: list[str] = []
    for name, values in to_dict(cfg).items():
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        lines.extend(f"{_key(key)} = {_toml_value(val)}" for key, val in values.items())
    return "\n".join(lines) + "\n"


def parse_toml(text: str, where: str = "config") -> Config:
    """Parse and validate TOML text; ``where`` names the file in error messages."""
    suffix = "" if where == "config" else f" (in {where})"
    try:
        raw = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"config: invalid TOML: arrays or tables nested too deeply{suffix}") from None
    except ValueError as exc:  # TOMLDecodeError, or an integer with too many digits
        first = (str(exc).splitlines() or [""])[0]
        if not isinstance(exc, tomllib.TOMLDecodeError) and "digits" in first:
            first = "an integer has too many digits"
        raise ConfigError(f"config: invalid TOML: {first}{suffix}") from None
    try:
        return from_dict(raw)
    except ConfigError as exc:
        if not suffix:
            raise
        raise ConfigError(f"{exc}{suffix}") from None


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config: file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config: {path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark (Notepad) is harmless
    except UnicodeDecodeError:
        hint = " (it looks like UTF-16)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ConfigError(f"config: {path} is not a UTF-8 text file{hint}") from None
    return parse_toml(text, where=str(path))


def save_config(cfg: Config, path: str | Path) -> None:
    from core.runlog import atomic_write_text

    atomic_write_text(Path(path), to_toml(cfg))


def _parse_override_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (ValueError, RecursionError):  # TOMLDecodeError, too many digits, nested too deeply
        return text  # a bare word is taken as a string: --set optim.name=adam


def apply_overrides(cfg: Config, overrides: Sequence[str]) -> Config:
    """Apply ``section.key=value`` overrides (values in TOML syntax)."""
    data = to_dict(cfg)
    for item in overrides:
        key, sep, text = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"config: --set expects SECTION.KEY=VALUE, got {_show(item)}")
        if section not in data:
            raise ConfigError(
                f"config: unknown section [{_key(section)}] in --set {_show(item)}; known sections: "
                + ", ".join(SECTIONS)
            )
        if name not in data[section] and not (section == "search" and "." in name):
            raise ConfigError(
                f"config: unknown key {section}.{_key(name)}; known keys: "
                + ", ".join(sorted(data[section]))
            )
        data[section][name] = _parse_override_value(text.strip())
    keys = {item.partition("=")[0].strip() for item in overrides}
    if "parallel.strategy" in keys and "parallel.workers" not in keys and data["parallel"]["strategy"] == "single":
        data["parallel"]["workers"] = 1  # switching to "single" means one worker unless told otherwise
    return from_dict(data)
