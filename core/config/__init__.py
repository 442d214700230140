"""Run configuration: frozen dataclasses, TOML load/save, one place of validation.

Every key has a default; unknown keys and wrong types are rejected with a
one-line :class:`ConfigError` that names the key, e.g.
``config: parallel.workers must be an integer from 1 to 256, got "two"``.

The package's modules, bottom up: ``fields`` (a key's facts and the checks of
its values), ``strategy_rules`` (the strategies by name and what each asks of
a config), ``sections`` (the sections' dataclasses, each key declared once,
and the table ``FIELDS`` made of them), ``space`` (the search space of
[search]), ``toml_text`` (values as TOML), ``document`` (the whole
:class:`Config`: built from a mapping, changed by dotted keys) and ``files``
(TOML text and files).
"""

from __future__ import annotations

from core.config.document import Config, apply_overrides, from_dict, to_dict
from core.config.fields import LIVE_EFFECTS, Bounds, Field
from core.config.files import load_config, parse_toml, save_config, to_toml
from core.config.sections import (
    ACTIVATIONS,
    BOUNDS,
    BUILTIN_DATASETS,
    CLASS_WEIGHTS,
    COLUMN_KINDS,
    DATA_SCHEMES,
    FIELDS,
    LR,
    MODEL_KINDS,
    MONITORED,
    OPTIMIZERS,
    PRECISIONS,
    PRUNERS,
    REGRESSION_LOSSES,
    SAMPLERS,
    SCHEDULES,
    SEARCHABLE_SECTIONS,
    SECTIONS,
    STRATEGIES,
    TASKS,
    AugmentConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
    ScheduleConfig,
    SearchConfig,
    SearchRange,
    TrackingConfig,
    TrainConfig,
    forkable_sections,
    live_keys,
    section_fields,
)
from core.errors import ConfigError
from core.metric_names import MAXIMIZED, METRICS

# What a paused run may change, and the sections a fork may change (the window and the session read these).
LIVE_KEYS = live_keys()
FORKABLE_SECTIONS = forkable_sections()

__all__ = [
    "ACTIVATIONS",
    "BOUNDS",
    "BUILTIN_DATASETS",
    "CLASS_WEIGHTS",
    "COLUMN_KINDS",
    "DATA_SCHEMES",
    "FIELDS",
    "FORKABLE_SECTIONS",
    "LIVE_EFFECTS",
    "LIVE_KEYS",
    "LR",
    "MAXIMIZED",
    "METRICS",
    "MODEL_KINDS",
    "MONITORED",
    "OPTIMIZERS",
    "PRECISIONS",
    "PRUNERS",
    "REGRESSION_LOSSES",
    "SAMPLERS",
    "SCHEDULES",
    "SEARCHABLE_SECTIONS",
    "SECTIONS",
    "STRATEGIES",
    "TASKS",
    "AugmentConfig",
    "Bounds",
    "Config",
    "ConfigError",
    "DataConfig",
    "Field",
    "ModelConfig",
    "OptimConfig",
    "ParallelConfig",
    "ScheduleConfig",
    "SearchConfig",
    "TrackingConfig",
    "SearchRange",
    "TrainConfig",
    "apply_overrides",
    "forkable_sections",
    "from_dict",
    "live_keys",
    "load_config",
    "parse_toml",
    "save_config",
    "section_fields",
    "to_dict",
    "to_toml",
]
