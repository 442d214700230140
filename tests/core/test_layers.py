"""core/ is the engine: it must not import Qt, directly or through what it imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "core"
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
