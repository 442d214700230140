"""Device selection, in one place: what a config may ask for and where each worker runs."""

from __future__ import annotations

import torch

from core.errors import ConfigError


def available_devices() -> list[str]:
    """Devices this machine has, so a picker never offers one that cannot run."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        devices.append("cuda")
        devices += [f"cuda:{i}" for i in range(n)] if n > 1 else []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def validate_device(device: str) -> None:
    """Refuse a device this machine does not have, with a one-line ConfigError."""
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f'config: parallel.device is {device!r} but this machine has no CUDA device; use "cpu"')
        if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
            raise ConfigError(
                f"config: parallel.device {device!r} does not exist; "
                f"this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError('config: parallel.device is "mps" but this machine has no Apple GPU; use "cpu"')


def worker_device(device: str, local_rank: int) -> torch.device:
    """The device of one worker: plain ``cuda`` spreads the workers of a node over its GPUs."""
    if device == "cuda":
        return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
    return torch.device(device)
