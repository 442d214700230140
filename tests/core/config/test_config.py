from __future__ import annotations

import re
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

from core.config import (
    BOUNDS,
    SECTIONS,
    Config,
    ConfigError,
    apply_overrides,
    from_dict,
    load_config,
    parse_toml,
    save_config,
    to_toml,
)


def test_defaults_round_trip_through_toml(tmp_path: Path) -> None:
    cfg = Config()
    path = tmp_path / "c.toml"
    save_config(cfg, path)
    assert load_config(path) == cfg
    assert parse_toml(to_toml(cfg)) == cfg


def test_every_key_has_a_default() -> None:
    assert parse_toml("") == Config()
    assert parse_toml("[data]\n[model]\n[optim]\n[train]\n[parallel]\n") == Config()


@pytest.mark.parametrize(
    "text, message",
    [
        ('[parallel]\nworkers = "two"', 'config: parallel.workers must be an integer from 1 to 256, got "two"'),
        ("[parallel]\nworkers = 0", "parallel.workers must be an integer from 1 to 256, got 0"),
        ("[optim]\nlr = -1", "optim.lr must be a number greater than 0"),
        ('[optim]\nname = "lbfgs"', "optim.name must be one of sgd, adam, adamw"),
        ("[train]\nepochs = 1.5", "train.epochs must be an integer"),
        ("[data]\ncolour = 1", "unknown key data.colour"),
        ("[extra]\na = 1", "unknown section [extra]"),
        ('[data]\nsource = "ftp://x"', "data.source must be builtin:NAME"),
        ('[model]\nkind = "transformer"', "model.kind must be one of"),
        ("[model]\nhidden = [64, -1]", "model.hidden must be a list of integers"),
        ('[parallel]\nstrategy = "single"\nworkers = 3', "parallel.workers must be 1 for strategy"),
        ("[parallel]\nsweep_lr = [0.1]", 'parallel.sweep_lr is for strategy "sweep" only'),
        ('[parallel]\nstrategy = "sweep"\nworkers = 2\nsweep_lr = [0.1]', "one learning rate per worker"),
        ("data = 3", "[data] must be a table"),
        ("[train\n", "invalid TOML"),
        ('[parallel]\ndevice = "tpu"', "parallel.device must be cpu, cuda, cuda:N or mps"),
    ],
)
def test_bad_values_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_toml(text)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[train]\nepochs = 'ten'\n")
    with pytest.raises(ConfigError, match=r"train.epochs .* \(in .*bad.toml\)"):
        load_config(path)
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_config(tmp_path / "bin.toml")


def test_single_strategy_defaults_to_one_worker() -> None:
    assert parse_toml('[parallel]\nstrategy = "single"').parallel.workers == 1


def test_overrides_parse_toml_values_and_bare_words() -> None:
    cfg = apply_overrides(
        Config(),
        [
            "parallel.strategy=sweep",
            "parallel.workers=3",
            "parallel.sweep_lr=[0.01,0.05,0.1]",
            "optim.name=adam",
            "model.hidden=[32]",
            "data.standardize=false",
        ],
    )
    assert cfg.parallel.sweep_lr == (0.01, 0.05, 0.1)
    assert cfg.optim.name == "adam"
    assert cfg.model.hidden == (32,)
    assert cfg.data.standardize is False
    with pytest.raises(ConfigError, match="unknown key optim.speed"):
        apply_overrides(Config(), ["optim.speed=3"])
    with pytest.raises(ConfigError, match="SECTION.KEY=VALUE"):
        apply_overrides(Config(), ["lr=3"])


def test_config_is_frozen() -> None:
    cfg = Config()
    with pytest.raises(FrozenInstanceError):
        cfg.train.epochs = 3  # type: ignore[misc]  # assigning a frozen field is what is tested
    assert cfg.replace("train", epochs=3).train.epochs == 3


def test_example_configs_load() -> None:
    examples = sorted(Path(__file__).resolve().parents[3].glob("resources/configs/*.toml"))
    assert len(examples) >= 4
    strategies = {load_config(p).parallel.strategy for p in examples}
    assert strategies >= {"single", "hogwild", "ddp", "sweep"}


def test_every_number_has_its_bounds_and_validation_uses_them() -> None:
    for section, cls in SECTIONS.items():
        for f in fields(cls):
            key = f"{section}.{f.name}"
            default = getattr(cls(), f.name)
            numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
            if numeric or f.type.startswith("tuple[int") or f.type.startswith("tuple[float"):
                assert key in BOUNDS, key
    for key, (lo, hi, lo_open) in BOUNDS.items():
        section, name = key.split(".")
        is_list = isinstance(getattr(SECTIONS[section](), name), tuple)
        above = hi * 2 if isinstance(hi, int) else hi + 1.0
        with pytest.raises(ConfigError, match=re.escape(key)):
            from_dict({section: {name: [above] if is_list else above}})
        if lo_open:
            with pytest.raises(ConfigError, match=re.escape(key)):
                from_dict({section: {name: [lo] if is_list else lo}})
