"""Config files: parse TOML text, load a file (one-line errors naming it), save one atomically."""

from __future__ import annotations

from pathlib import Path

from core.config.document import Config, from_dict
from core.config.toml_text import tomllib
from core.errors import ConfigError


def to_toml(cfg: Config) -> str:
    return cfg.to_toml()


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
    from core.runfiles.writing import atomic_write_text

    atomic_write_text(Path(path), to_toml(cfg))
