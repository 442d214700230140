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
    modules = [f"core.{p.stem}" for p in CORE.glob("*.py") if p.stem not in ("__main__",)]
    code = (
        "import sys\n"
        f"for m in {modules!r}: __import__(m)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {QT!r}]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=CORE.parent)
    assert res.returncode == 0, res.stdout + res.stderr


def test_import_contracts_are_kept() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run([str(lint_imports), "--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
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
