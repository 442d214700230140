"""The strategies by name: ``name -> "module:Class"`` (plain data, importable from anywhere)."""

from __future__ import annotations

REGISTRY: dict[str, str] = {
    "single": "core.strategies.single:Single",
    "hogwild": "core.strategies.hogwild:Hogwild",
    "ddp": "core.strategies.ddp:DDP",
    "sweep": "core.strategies.sweep:Sweep",
    "search": "core.strategies.search:Search",
}
NAMES: tuple[str, ...] = tuple(REGISTRY)
