"""The whole config: :class:`Config`, built and checked from a mapping, and changed by dotted keys.

``from_dict`` validates every key through its Field, then the rules between
keys; the rules a strategy makes (a fixed worker count, keys only it reads,
what it needs besides) are read from its line of
:data:`~core.config.strategy_rules.STRATEGY_RULES`, never tested by name, and
no strategy is loaded.
``Config.with_changes`` is the one way a dotted-key change is applied:
``--set``, ``Config.replace``, a search's trial and a paused run's live
changes all go through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from core.config.fields import show, toml_key
from core.config.sections import (
    FIELDS,
    SECTIONS,
    TABLE_PATIENCE,
    AugmentConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
    ScheduleConfig,
    SearchConfig,
    SearchRange,
    Section,
    TrackingConfig,
    TrainConfig,
    section_defaults,
    section_fields,
)
from core.config.space import checked_space, space_values
from core.config.strategy_rules import STRATEGY_RULES, StrategyRules
from core.config.toml_text import parse_override_value, toml_text
from core.errors import ConfigError


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
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def with_changes(self, changes: Mapping[str, Any]) -> Config:
        """A copy with dotted keys ("optim.lr") changed, validated (ConfigError names the key).

        Choosing a strategy with a fixed worker count ("single") sets that count unless
        ``parallel.workers`` is changed too.
        """
        data = to_dict(self)
        for key, value in changes.items():
            section, _, name = key.partition(".")
            data[section][name] = value
        if "parallel.strategy" in changes and "parallel.workers" not in changes:
            fixed = _fixed_workers(data["parallel"]["strategy"])
            if fixed:
                data["parallel"]["workers"] = fixed
        return from_dict(data)

    def value(self, key: str) -> Any:
        """The value of a dotted key ("optim.lr")."""
        section, _, name = key.partition(".")
        return getattr(getattr(self, section), name)

    def replace(self, section: str, **values: Any) -> Config:
        """A copy with some keys of one section changed, validated."""
        return self.with_changes({f"{section}.{name}": value for name, value in values.items()})

    def to_toml(self) -> str:
        return toml_text(to_dict(self))

    def early_stop_patience(self, table: bool) -> int:
        """Epochs without improvement before the run stops; 0 = never. ``train.early_stop_patience`` -1 (auto)
        is ``TABLE_PATIENCE`` on a table (``table``: the data has a schema) and never elsewhere, nor for a
        sweep: its workers compare settings over the same epochs, and a slow starter is not cut short."""
        chosen = int(self.train.early_stop_patience)
        if chosen >= 0:
            return chosen
        strategy = _strategy(self.parallel.strategy)
        return TABLE_PATIENCE if table and strategy is not None and not strategy.model_per_worker else 0


def _strategy(name: Any) -> StrategyRules | None:
    return STRATEGY_RULES.get(name) if isinstance(name, str) else None


def _fixed_workers(name: Any) -> int:
    rules = _strategy(name)
    return rules.fixed_workers if rules is not None else 0


def _value(cfg: Config, key: str) -> Any:
    section, _, name = key.partition(".")
    return getattr(getattr(cfg, section), name)


def _strategy_rules(cfg: Config) -> None:
    """What the chosen strategy asks of the config: its worker count, keys no other strategy reads, its own checks."""
    p = cfg.parallel
    rules = STRATEGY_RULES[p.strategy]
    if rules.fixed_workers and p.workers != rules.fixed_workers:
        raise ConfigError(
            f'config: parallel.workers must be {rules.fixed_workers} for strategy "{rules.name}", got {p.workers}'
        )
    for other in STRATEGY_RULES.values():
        for key in other.own_keys:
            if key not in rules.own_keys and _value(cfg, key) != FIELDS[key].default:
                raise ConfigError(f'config: {key} is for strategy "{other.name}" only, got strategy {show(p.strategy)}')
    rules.check(cfg)


def _cross_check(cfg: Config) -> None:
    _strategy_rules(cfg)
    p = cfg.parallel
    if p.precision == "16-mixed" and not p.device.startswith("cuda"):
        raise ConfigError(
            f'config: parallel.precision "16-mixed" needs a CUDA device (parallel.device = '
            f'"cuda"), got device {show(p.device)}; use "bf16-mixed" on the CPU'
        )
    sch = cfg.schedule
    if sch.kind in ("cosine", "one-cycle") and sch.min_lr >= cfg.optim.lr:
        raise ConfigError(f"config: schedule.min_lr must be below optim.lr ({cfg.optim.lr:g}), got {sch.min_lr:g}")
    search = cfg.search
    if search.sampler == "grid":
        ranged = [key for key, value in search.space if isinstance(value, SearchRange)]
        if ranged:
            raise ConfigError(
                f'config: search.sampler "grid" needs a list of values for every key, got a range for {show(ranged[0])}'
            )


def _section(name: str, cls: type[Section], given: Mapping[str, Any]) -> Any:
    """One section from the keys given (the others default), every value through its Field."""
    if cls.dotted_keys:
        values = space_values(name, given)
    else:
        known = section_defaults(name)
        for key in given:
            if key not in known:
                raise ConfigError(
                    f"config: unknown key {name}.{toml_key(key)}; known keys: " + ", ".join(sorted(known))
                )
        values = {**known, **given}
        if cls is ParallelConfig and "workers" not in given:
            fixed = _fixed_workers(values["strategy"])
            if fixed:
                values["workers"] = fixed  # e.g. "single" means one worker unless the file says otherwise
    for f in section_fields(name):
        values[f.name] = f.validate(values[f.name])
    if cls.dotted_keys:
        values = checked_space(values)
    return cls(**values)


def from_dict(raw: Mapping[str, Any]) -> Config:
    """Build a validated Config from a parsed TOML mapping."""
    if not isinstance(raw, Mapping):
        raise ConfigError("config: the top level must be a table")
    for name in raw:
        if name not in SECTIONS:
            raise ConfigError(f"config: unknown section [{toml_key(name)}]; known sections: " + ", ".join(SECTIONS))
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        given = raw.get(name, {})
        if not isinstance(given, Mapping):
            raise ConfigError(f"config: [{name}] must be a table, got {show(given)}")
        sections[name] = _section(name, cls, given)
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
    for name, cls in SECTIONS.items():
        section = {f.name: getattr(getattr(cfg, name), f.name) for f in fields(cls)}
        space = section.pop("space", ()) if cls.dotted_keys else ()
        out[name] = {k: _plain(v) for k, v in section.items()}
        for key, value in section.items():
            if FIELDS[f"{name}.{key}"].type == "table":  # (name, kind) pairs are a TOML table
                out[name][key] = {k: v for k, v in value}
        out[name].update((key, _plain(value)) for key, value in space)
    return out


def apply_overrides(cfg: Config, overrides: list[str] | tuple[str, ...]) -> Config:
    """Apply ``section.key=value`` overrides (values in TOML syntax)."""
    known = to_dict(cfg)
    changes: dict[str, Any] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise ConfigError(f"config: --set expects SECTION.KEY=VALUE, got {show(item)}")
        if section not in SECTIONS:
            raise ConfigError(
                f"config: unknown section [{toml_key(section)}] in --set {show(item)}; "
                "known sections: " + ", ".join(SECTIONS)
            )
        dotted = SECTIONS[section].dotted_keys and "." in name
        if name not in known[section] and not dotted:
            raise ConfigError(
                f"config: unknown key {section}.{toml_key(name)}; known keys: " + ", ".join(sorted(known[section]))
            )
        changes[f"{section}.{name}"] = parse_override_value(text.strip())
    return cfg.with_changes(changes)
