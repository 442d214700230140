"""The config's sections, each key declared once with its facts, and the table they make.

``FIELDS`` ("section.key" -> :class:`~core.config.fields.Field`) is what
validation, ``BOUNDS``, ``--set``, the live changes of a paused run, forks
and the window's widgets all read. A section says on its class whether a
fork may change it (``forkable``), whether a search may vary its keys
(``searchable``) and whether it takes "section.key" entries of its own
(``dotted_keys``: the search space).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

from core.config.fields import (
    Bounds,
    Field,
    as_tuple,
    check_bool,
    check_choice,
    check_columns,
    check_device,
    check_float,
    check_int,
    check_ints,
    check_model_kind,
    check_rates,
    check_some_ints,
    check_source,
    check_str,
    check_strings,
    check_text_encoder,
    check_tracking_uri,
    check_weights,
    key,
)
from core.config.strategy_rules import NAMES as STRATEGIES
from core.metric_names import METRICS

OPTIMIZERS = ("sgd", "adam", "adamw")
ACTIVATIONS = ("relu", "gelu", "tanh", "silu")
MODEL_KINDS = ("linear", "mlp", "cnn")
WEIGHTS = ("hub", "none")  # or a path (core.config.fields.check_weights)
FINETUNE = ("head", "full")
HEAD_FITS = ("lbfgs", "optimizer")
DATA_SCHEMES = ("builtin", "csv", "parquet", "npz", "images")
BUILTIN_DATASETS = ("digits", "iris", "wine", "breast_cancer", "diabetes", "synthetic")  # builtin:NAME
SCHEDULES = ("constant", "step", "cosine", "one-cycle", "plateau")
MONITORED = ("auto", "val_loss", "val_accuracy")
COLUMN_KINDS = ("number", "category", "bool", "datetime", "datetime:dmy", "datetime:mdy", "text", "ignore")
TASKS = ("auto", "classification", "regression")
CLASS_WEIGHTS = ("none", "balanced")
REGRESSION_LOSSES = ("auto", "mse", "huber")
DIVERGENCE_ACTIONS = ("recover", "pause", "fail")
PRECISIONS = ("32", "bf16-mixed", "16-mixed")
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "asha", "none")
DEVICES = ("cpu", "cuda", "mps")  # and cuda:N

LR = Bounds(0.0, 100.0, lo_open=True)


def _int(default: int, lo: float, hi: float, help: str = "", effect: str = "", doc: str = "") -> Any:
    return key(default, check_int, "int", bounds=(lo, hi), help=help, effect=effect, doc=doc)


def _float(
    default: float, lo: float, hi: float, help: str = "", effect: str = "", lo_open: bool = False, doc: str = ""
) -> Any:
    return key(default, check_float, "float", bounds=Bounds(lo, hi, lo_open), help=help, effect=effect, doc=doc)


def _choice(default: str, choices: tuple[str, ...], help: str = "", doc: str = "") -> Any:
    return key(default, check_choice, "choice", choices=choices, help=help, doc=doc)


@dataclass(frozen=True)
class Section:
    """What a section says about all of its keys."""

    forkable: ClassVar[bool] = False  # a fork may change its keys
    searchable: ClassVar[bool] = False  # a search may vary its keys
    dotted_keys: ClassVar[bool] = False  # it also takes "section.key" entries (the search space)


@dataclass(frozen=True)
class DataConfig(Section):
    source: str = key(
        "builtin:digits",
        check_source,
        "source",
        choices=DATA_SCHEMES,
        help="builtin:NAME | csv:PATH | parquet:PATH | npz:PATH | images:DIR",
        doc="where the samples come from: `builtin:NAME` (scikit-learn's digits, iris, wine, breast_cancer, "
        "diabetes (a numeric target: regression); `synthetic?n=&features=&classes=&seed=`), `csv:PATH`, "
        "`parquet:PATH`, `npz:PATH` or `images:DIR` (see [data](data.md))",
    )
    target: str = key("label", check_str, "str", help="The table column holding the target: class labels or numbers")
    val_fraction: float = _float(0.2, 0.0, 0.9, "Share of samples held out for validation")
    loader_workers: int = _int(0, 0, 64, "DataLoader processes per worker decoding images (0 = in the worker)")
    image_size: int = _int(0, 0, 1024, "Resize images to SIZE×SIZE; 0 keeps the first image's size")
    standardize: bool = key(
        True, check_bool, "bool", help="Standardize features", doc="standardise features with training statistics"
    )
    # tables (csv:, parquet:): kinds that override the inferred ones, as (column, kind) pairs
    columns: tuple[tuple[str, str], ...] = key(
        (),
        check_columns,
        "table",
        choices=COLUMN_KINDS,
        help="kinds that override the inferred ones: {column = kind}",
        doc='tables: `{name = "number" | "category" | "bool" | "datetime" | "text" | "ignore"}` overriding the '
        'inferred kinds; `"datetime:dmy"` or `"datetime:mdy"` says which comes first in dates such as 05/03/2024',
    )
    missing: tuple[str, ...] = key(
        ("", "NA", "NaN", "null", "?"),
        check_strings,
        "strings",
        help='cells that mean "no value"',
        doc='tables: cells that mean "no value" (exact match after stripping)',
    )


@dataclass(frozen=True)
class ModelConfig(Section):
    searchable = True
    kind: str = key(
        "mlp",
        check_model_kind,
        "model_kind",
        choices=MODEL_KINDS,
        help="linear | mlp | cnn | custom:PATH.py:FUNCTION | timm:ARCHITECTURE (a pretrained backbone)",
        doc="`linear`, `mlp`, `cnn`, `timm:NAME` (a pretrained backbone, see "
        "[pretrained backbones](training.md#pretrained-backbones)), `custom:PATH.py:FUNCTION` (called with "
        "`(input_shape, num_classes)`, returns an `nn.Module`; `input_shape` is `(C, H, W)` for images, "
        "`(F,)` for tables, see [data](data.md))",
    )
    hidden: tuple[int, ...] = key(
        (256, 256),
        check_ints,
        "ints",
        bounds=(1, 65536),
        help="Widths of the hidden layers, e.g. 256, 256",
        doc="MLP widths; cnn uses the first as its head",
    )
    activation: str = _choice("relu", ACTIVATIONS, doc="the hidden layers' activation")
    dropout: float = _float(0.0, 0.0, 0.95, doc="dropout after each hidden layer; 0 = none")
    channels: tuple[int, ...] = key(
        (16, 32),
        check_some_ints,
        "ints",
        bounds=(1, 4096),
        help="Channels of the convolution blocks, e.g. 16, 32",
        doc="cnn conv widths",
    )  # cnn only
    # timm only: where the backbone's weights come from: hub (huggingface_hub's cache, downloaded once), none
    # (random), or a .safetensors / .pth file in timm's key layout
    weights: str = key(
        "hub",
        check_weights,
        "str",
        choices=WEIGHTS,
        help="hub | none | PATH.safetensors",
        doc="`timm:` kinds: `hub` (huggingface_hub's cache, downloaded once; `HF_HOME`, `HF_HUB_OFFLINE`), "
        "`none` (random), or a `.safetensors`/`.pth` file in timm's key layout",
    )
    # timm: head (the backbone frozen, its features computed once and cached) | full (every layer trains);
    # a table's text encoder: head (frozen) | full (fine-tuned on the training split first)
    finetune: str = _choice(
        "head",
        FINETUNE,
        "head: train the classifier on cached features (a frozen text encoder); full: every layer (the text "
        "encoder fine-tuned first)",
        doc="`timm:` kinds: `head` (the backbone frozen, its features cached, a linear head trains) or `full`. "
        "With `model.text_encoder`: `head` (the encoder frozen) or `full` (the encoder first fine-tuned on the "
        "training split, with a linear head on its sentence embedding and the run's task as the loss, then "
        "saved in the run directory as `text-encoder/`, which embeds the texts from then on, see "
        "[data](data.md)). Other models do not read it.",
    )
    # finetune = "head": how the head learns from the cached features
    head_fit: str = _choice(
        "lbfgs",
        HEAD_FITS,
        "lbfgs: fit the head to convergence on all cached features at once; optimizer: train it by batches",
        doc='`model.finetune = "head"`: `lbfgs` (the head fitted by full-batch L-BFGS on the cached features, L2 '
        "1/n as scikit-learn's `LogisticRegression(C=1)`, or `optim.weight_decay` when set; `optim.*` and "
        "`train.batch_size` do not apply; under `single` and `hogwild`, see "
        "[pretrained backbones](training.md#pretrained-backbones)) or `optimizer` (trained by `optim.*` in batches)",
    )
    # tables: a pretrained sentence encoder embeds every free-text column instead of hashed n-grams
    text_encoder: str = key(
        "",
        check_text_encoder,
        "str",
        help="A sentence-transformers model (hub name or folder) that embeds text columns; empty: n-grams",
        doc="tables: a [sentence-transformers](https://sbert.net) model, by hub name (huggingface_hub's cache; "
        "`HF_HOME`, `HF_HUB_OFFLINE`) or the folder it was saved to, whose embedding of each text column "
        "the model learns from (frozen, or fine-tuned first: `model.finetune`) (each distinct text encoded once and cached, see [data](data.md)); empty: hashed "
        "word and character n-grams",
    )


@dataclass(frozen=True)
class OptimConfig(Section):
    forkable = True
    searchable = True
    name: str = _choice("sgd", OPTIMIZERS, doc="the optimizer")
    lr: float = key(0.05, check_float, "float", bounds=LR, help="Learning rate, e.g. 0.05 or 1e-3", effect="optimizer")
    momentum: float = _float(0.9, 0.0, 0.999, "SGD momentum")
    weight_decay: float = _float(0.0, 0.0, 10.0, effect="optimizer", doc="weight decay")
    # a pretrained backbone's rate, as a share of optim.lr (model.finetune = "full")
    backbone_lr_mult: float = _float(
        0.1,
        0.0,
        10.0,
        "The backbone's learning rate as a share of optim.lr",
        doc='`model.finetune = "full"`: the backbone\'s rate as a share of `optim.lr`',
    )


# a table's small data overfits within a few epochs of its best: auto early stopping waits this many
TABLE_PATIENCE = 5


@dataclass(frozen=True)
class TrainConfig(Section):
    forkable = True
    searchable = True
    epochs: int = _int(10, 1, 100000, "Passes over the training data", effect="loop")
    schedule_epochs: int = _int(
        0,
        0,
        100000,
        doc="the epochs the lr schedule spans (cosine, one-cycle); 0 = `train.epochs`. A race sets it to the "
        "run's epochs so that a variant stopped at a rung keeps the schedule of the whole run",
    )
    batch_size: int = _int(64, 1, 1 << 20, "Samples per optimizer step, per worker", effect="batches")
    seed: int = _int(0, 0, 2**31 - 1, "Random seed (worker i uses seed + i)")
    # seconds between consistent checkpoints while training; 0 = only at the end
    checkpoint_every: float = _float(
        30.0, 0.0, 86400.0, doc="seconds between consistent checkpoints while training; 0 = only at the end"
    )
    monitor: str = _choice(
        "auto",
        MONITORED,
        "What the best checkpoint and early stopping watch; auto: accuracy "
        "(balanced on skewed classes), RMSE for a regression",
        doc='what "best" means (best.pt, early stopping, plateau): `val_loss`, `val_accuracy`, or auto '
        "(accuracy, balanced on skewed classes; RMSE for a regression)",
    )
    early_stop_patience: int = _int(
        -1,
        -1,
        100000,
        "Stop after this many epochs without improvement of the selected figure; 0 = never, "
        f"-1 = auto ({TABLE_PATIENCE} on a table, except a sweep's; never otherwise)",
        doc="stop after this many epochs without improvement of the selected figure (0 = never; -1 = auto: "
        f"{TABLE_PATIENCE} on a table except a sweep's, never otherwise); the run ends `finished` with "
        "`stop_reason`",
    )
    early_stop_min_delta: float = _float(0.0, 0.0, 1e9, doc="a smaller change is no improvement")
    task: str = _choice(
        "auto", TASKS, doc="tables: what the target is; auto decides (see [tables](data.md#tables-one-schema))"
    )
    class_weights: str = _choice(
        "none", CLASS_WEIGHTS, doc="`balanced`: inverse-frequency weights in the cross-entropy"
    )
    select_by: str = _choice(
        "auto",
        ("auto",) + METRICS,
        doc="the metric that picks best.pt (the run's model and figure) and stops early: any `val_*` metric; "
        "auto = `train.monitor`",
    )
    loss: str = _choice(
        "auto",
        REGRESSION_LOSSES,
        doc="regression, on the standardised target: `auto` (huber, delta 1: a long-tailed target's far values "
        "pull it no harder than a unit away; the same as mse within one standard deviation), `mse` or `huber`",
    )
    on_divergence: str = _choice(
        "recover",
        DIVERGENCE_ACTIONS,
        "A non-finite loss: recover (roll back, the worker's rate / 10, go on), pause (the same, then pause), fail",
        doc="a non-finite loss: `recover` (roll back, that worker's rate / 10, go on; after 5 the run fails), "
        "`pause` (the same, then pause), `fail`",
    )


@dataclass(frozen=True)
class ParallelConfig(Section):
    strategy: str = _choice(
        "hogwild", STRATEGIES, doc="how the workers share the run (the strategy registry, `core/strategies/`)"
    )
    workers: int = _int(
        2, 1, 256, "Training processes", doc="training processes; a strategy with a fixed count sets it (single: 1)"
    )
    threads_per_worker: int = _int(
        0, 0, 1024, "Torch threads in each worker; automatic shares the cores", doc="0 = cores // workers"
    )
    device: str = key(
        "cpu",
        check_device,
        "device",
        choices=DEVICES,
        help="cpu | cuda | cuda:N | mps",
        doc="cpu, cuda, cuda:N, mps (checked at start)",
    )
    sweep_lr: tuple[float, ...] = key(
        (),
        check_rates,
        "floats",
        bounds=LR,
        help="Sweep: one learning rate per worker; empty = the same rate, different seeds",
    )
    stall_timeout: float = _float(
        120.0, 0.0, 86400.0, doc="seconds without records (not paused) before a worker is reported stalled; 0 = never"
    )
    precision: str = _choice(
        "32",
        PRECISIONS,
        "bf16-mixed: autocast in the training step; 16-mixed needs CUDA",
        doc="`bf16-mixed` (autocast in the training step), `16-mixed` (CUDA only, with a GradScaler)",
    )


@dataclass(frozen=True)
class ScheduleConfig(Section):
    """The learning rate as a function of the run's progress; optim.lr is its base (peak)."""

    searchable = True
    kind: str = _choice("constant", SCHEDULES, doc="the schedule; `optim.lr` is the base (peak)")
    warmup_steps: int = _int(
        0,
        0,
        10**9,
        "Steps over which the rate rises linearly from 0",
        doc="linear warm-up from 0 over this many steps (any kind)",
    )
    min_lr: float = _float(
        0.0,
        0.0,
        100.0,
        "Cosine and one-cycle: the rate at the last step",
        doc="cosine, one-cycle: the lr at the last step (below `optim.lr`)",
    )
    step_epochs: int = _int(10, 1, 100000, doc="step: multiply the rate by gamma every this many epochs")
    gamma: float = _float(0.1, 0.0, 1.0, lo_open=True, doc="step: the factor every step_epochs; plateau: the factor")
    pct_start: float = _float(0.3, 0.0, 1.0, doc="one-cycle: share of the run rising from lr/25 to lr")
    patience: int = _int(2, 0, 10000, doc="plateau: evaluations without improvement before the factor drops")


@dataclass(frozen=True)
class AugmentConfig(Section):
    """Random changes to training images (never to validation); every default is off."""

    searchable = True
    crop_scale: float = _float(
        1.0, 0.05, 1.0, "Augment: random resized crop keeping at least this share of the area; 1 = off"
    )
    hflip: bool = key(False, check_bool, "bool", help="Random horizontal flip", doc="random horizontal flip")
    rotation: float = _float(0.0, 0.0, 180.0, "Augment: random rotation up to this many degrees; 0 = off")
    jitter: float = _float(0.0, 0.0, 1.0, "Augment: brightness, contrast and saturation jitter strength; 0 = off")


class SearchRange(NamedTuple):
    """A numeric search range of one key."""

    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class SearchConfig(Section):
    """strategy "search": trials sampled by Optuna; ``space`` holds ("section.key", range or choices)."""

    dotted_keys = True
    trials: int = _int(20, 1, 100000, doc="trials per run (a continued search adds as many)")
    sampler: str = _choice(
        "tpe", SAMPLERS, doc="`tpe` (constant liar for parallel trials), `random`, `grid` (lists only)"
    )
    pruner: str = _choice("median", PRUNERS, doc="`median`, `asha` (successive halving), `none`")
    metric: str = _choice("val_accuracy", METRICS, doc="the trial's objective, reported each epoch")
    space: tuple[tuple[str, Any], ...] = key(
        (),
        as_tuple,
        "space",
        help='"section.key" = range or choices',
        doc='`"section.key" = {low, high, log}` (a range) or a list of choices, for a key of a searchable section',
    )


@dataclass(frozen=True)
class TrackingConfig(Section):
    """Where a run is mirrored besides its own folder (TensorBoard's files are always written, in ``tb/``)."""

    mlflow: str = key(
        "",
        check_tracking_uri,
        "str",
        help="An MLflow tracking URI the run is mirrored to (http://HOST:5000, sqlite:///PATH); empty: none",
        doc="an MLflow tracking URI (`http://HOST:5000`, `sqlite:///PATH`, ...) the run is mirrored to as it trains; "
        "empty: `MLFLOW_TRACKING_URI` when set, else none",
    )


SECTIONS: dict[str, type[Section]] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "parallel": ParallelConfig,
    "schedule": ScheduleConfig,
    "augment": AugmentConfig,
    "search": SearchConfig,
    "tracking": TrackingConfig,
}

# The one table: "section.key" -> its Field, in the order the sections declare them.
FIELDS: dict[str, Field] = {
    f"{name}.{f.name}": Field(key=f"{name}.{f.name}", default=f.default, forkable=cls.forkable, **f.metadata)
    for name, cls in SECTIONS.items()
    for f in fields(cls)
}

# "section.key" -> its Bounds, for the numeric keys.
BOUNDS: dict[str, Bounds] = {k: f.bounds for k, f in FIELDS.items() if f.bounds is not None}

# what a search may vary: the run's shape (data, workers) stays
SEARCHABLE_SECTIONS = tuple(name for name, cls in SECTIONS.items() if cls.searchable)


def section_fields(section: str) -> list[Field]:
    """The fields of one section, in order."""
    return [FIELDS[f"{section}.{f.name}"] for f in fields(SECTIONS[section])]


def section_defaults(section: str) -> dict[str, Any]:
    return {f.name: f.default for f in section_fields(section)}


def live_keys() -> tuple[str, ...]:
    """The keys a paused run accepts; every worker applies them when it resumes, at the same batch."""
    return tuple(sorted(k for k, f in FIELDS.items() if f.live))


def forkable_sections() -> tuple[str, ...]:
    """The sections whose keys a fork of a run may change."""
    return tuple(name for name, cls in SECTIONS.items() if cls.forkable)
