"""core/ is the engine: it must not import Qt or the window, directly or through what it imports.

The layers are written down as import-linter contracts in pyproject.toml
([tool.importlinter]); these tests run them, and look for import cycles.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core"
QT = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "qtpy", "shiboken6")


def test_no_qt_import_statements_in_core() -> None:
    offenders = []
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in QT]
    assert offenders == []


def test_importing_every_core_module_loads_no_qt() -> None:
    modules = [
        f"core.{'.'.join(p.relative_to(CORE).with_suffix('').parts)}"
        for p in CORE.rglob("*.py")
        if p.stem not in ("__main__", "__init__")
    ]
    code = (
        "import sys\n"
        f"for m in {modules!r}: __import__(m)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {QT!r}]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=CORE.parent)
    assert res.returncode == 0, res.stdout + res.stderr


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run(
        [str(lint_imports), "--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert " 0 broken" in res.stdout, res.stdout


def test_no_import_cycle_among_core_modules() -> None:
    """No two modules of core reach each other through imports (function-level imports count too)."""
    graph = grimp.build_graph("core", cache_dir=None, exclude_type_checking_imports=True)  # annotations only
    modules = sorted(graph.modules)
    upstream = {m: graph.find_upstream_modules(m) for m in modules}
    cycles = []
    for a in modules:
        for b in sorted(upstream[a]):
            if a < b and a in upstream[b]:
                there = graph.find_shortest_chain(importer=a, imported=b) or ()
                back = graph.find_shortest_chain(importer=b, imported=a) or ()
                cycles.append(" -> ".join(there) + " | " + " -> ".join(back))
    assert cycles == []


PICTURE_BEGIN = "<!-- layers: begin (generated from pyproject.toml by tests/core/test_layers.py) -->\n```\n"
PICTURE_END = "```\n<!-- layers: end -->"


def _contract(name: str) -> list[list[str]]:
    """The packages and modules of each layer of a layers contract, top first."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"][
        "contracts"
    ]
    layers = next(c for c in contracts if c["id"] == name)["layers"]
    return [[name.strip() for name in layer.replace("|", ":").split(":") if name.strip()] for layer in layers]


def _three_layers() -> list[list[str]]:
    return _contract("core-layers")


def _children(package: Path, prefix: str) -> list[str]:
    """The modules and packages directly in a folder, as dotted names."""
    top = sorted(f"{prefix}.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__")
    return top + sorted(f"{prefix}.{p.name}" for p in package.iterdir() if (p / "__init__.py").is_file())


def test_every_core_folder_is_in_one_of_the_three_layers() -> None:
    """A new module or folder of core must be placed: faces (core.cli), services or the engine; the engine's
    own order names each of its folders."""
    named = [m for layer in _three_layers() for m in layer if m.startswith("core.")]
    assert len(_three_layers()) == 3
    assert len(named) == len(set(named)), "a module is named in two layers"
    top = [m for m in _children(CORE, "core") if m != "core.__main__"]
    assert sorted(set(top) - set(named)) == []
    assert sorted(set(named) - set(top)) == []  # and none it names is gone
    engine = [m for layer in _contract("engine-layers") for m in layer]
    assert sorted(engine) == sorted(_three_layers()[2])


def test_every_window_folder_is_in_the_window_layers() -> None:
    named = [m for layer in _contract("window-layers") for m in layer]
    assert sorted(named) == sorted(_children(ROOT / "app", "app"))


def test_the_folders_hold_at_most_twelve_modules_directly() -> None:
    """A folder that grows past twelve modules is split into ones that say what they hold."""
    crowded = {}
    for folder in [
        ROOT / "app",
        CORE,
        *(p.parent for p in (ROOT / "app").rglob("__init__.py")),
        *(p.parent for p in CORE.rglob("__init__.py")),
    ]:
        count = len([p for p in folder.glob("*.py") if p.stem != "__init__"])
        if count > 12:
            crowded[str(folder.relative_to(ROOT))] = count
    assert crowded == {}


def _row(names: list[str], indent: str) -> list[str]:
    lines, row = [], indent
    for name in names:
        if len(row) + len(name) + 1 > 100 and row.strip():
            lines.append(row.rstrip())
            row = indent + " " * 14
        row += f" {name}"
    lines.append(row.rstrip())
    return lines


def _folder(name: str) -> str:
    path = ROOT / name.replace(".", "/")
    leaf = name.rsplit(".", 1)[-1]
    return f"{leaf}/" if path.is_dir() else leaf


def _contents(name: str) -> list[str]:
    """The modules (and sub-folders, with a slash) of a package; nothing for a module."""
    path = ROOT / name.replace(".", "/")
    if not path.is_dir():
        return []
    return [_folder(m) for m in _children(path, name) if not m.endswith("__main__")]


def render_layers() -> str:
    """The layer picture docs/ARCHITECTURE.md shows, made from the contracts: each folder with what it holds."""
    faces, services, _ = _three_layers()
    lines = ["faces: " + " ".join(_folder(m) for m in faces), "        ↓"]
    lines += ["services/:"]
    lines += _row(_contents("core.services"), "   ")
    lines += ["        ↓", "engine, each layer above the ones it imports:"]
    for layer in _contract("engine-layers"):
        for name in layer:
            lines += _row([f"{_folder(name):<13}"] + _contents(name), "   ")
    lines += ["", "the window (app/), each layer above the ones it imports:"]
    for layer in _contract("window-layers"):
        for name in layer:
            lines += _row([f"{_folder(name):<13}"] + _contents(name), "   ")
    return "\n".join(line.rstrip() for line in lines) + "\n"


def test_the_architecture_picture_matches_the_contract() -> None:
    """The layer picture in docs/ARCHITECTURE.md is the contract's (regenerate: python tests/core/test_layers.py)."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    begin, end = PICTURE_BEGIN, PICTURE_END
    assert begin in doc and end in doc
    shown = doc.split(begin, 1)[1].split(end, 1)[0]
    assert shown == render_layers()


if __name__ == "__main__":  # rewrite the picture in docs/ARCHITECTURE.md from the contract
    path = ROOT / "docs" / "ARCHITECTURE.md"
    doc = path.read_text(encoding="utf-8")
    begin, end = PICTURE_BEGIN, PICTURE_END
    head, rest = doc.split(begin, 1)
    path.write_text(head + begin + render_layers() + end + rest.split(end, 1)[1], encoding="utf-8")


DOOR = ("core.services", "core.config", "core.errors", "core.metric_names")


def test_the_faces_import_the_engine_only_through_its_door() -> None:
    """Every import line of app/ and core/cli/ that names core, annotations' included (which import-linter's
    one-door contract leaves out), names the services, the config, the errors or the metric names."""
    past_door = []
    for path in sorted([*(ROOT / "app").rglob("*.py"), *(CORE / "cli").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                inside = name == "core" or name.startswith("core.")
                if (
                    inside
                    and not name.startswith("core.cli")
                    and not any(name == d or name.startswith(d + ".") for d in DOOR)
                ):
                    past_door.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert past_door == []
