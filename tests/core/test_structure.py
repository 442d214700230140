"""The shape the code keeps: small modules and classes, commands only in core/cli, one owner of the
run directory's names, strategies asked rather than named.

These read the source (ast), so a breach names the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 500
MAX_METHODS = 30
MAX_STRATEGY_METHODS = 25
STRATEGY_NAMES = {"single", "hogwild", "ddp", "sweep", "search"}


def _sources() -> list[tuple[str, ast.Module, str]]:
    out = []
    for base in ("core", "app"):
        for path in sorted((ROOT / base).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            out.append((path.relative_to(ROOT).as_posix(), ast.parse(text), text))
    return out


SOURCES = _sources()


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _code_lines(text: str) -> int:
    """Lines that hold code: blank lines and comment lines left out (the formatter's wrapping adds lines, not
    code)."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def test_no_module_is_longer_than_500_lines() -> None:
    long = [f"{rel}: {_code_lines(text)} lines" for rel, _t, text in SOURCES if _code_lines(text) > MAX_LINES]
    assert long == []


def test_no_class_has_more_than_30_methods() -> None:
    big = []
    for rel, tree, _text in SOURCES:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                if n > MAX_METHODS:
                    big.append(f"{rel}:{node.lineno} {node.name}: {n} methods")
    assert big == []


def test_the_strategy_plans_in_at_most_25_methods() -> None:
    """What ranks do together is the strategy's Collectives, not more methods of the Strategy."""
    (tree,) = [t for rel, t, _text in SOURCES if rel == "core/strategies/base.py"]
    (strategy,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Strategy"]
    n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in strategy.body)
    assert n <= MAX_STRATEGY_METHODS, f"Strategy: {n} methods"


def test_command_line_functions_live_only_in_core_cli() -> None:
    found = []
    for rel, tree, _text in SOURCES:
        if rel.startswith("core/cli/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name == "configure_cli" or node.name.startswith("cmd_")
            ):
                found.append(f"{rel}:{node.lineno} {node.name}")
    assert found == []


def test_the_checkpoint_file_name_is_written_in_one_module() -> None:
    """ "last.pt" as a name (not a sentence of help text that mentions the file) only in core/runfiles/layout.py."""
    found = []
    for rel, tree, _text in SOURCES:
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and "last.pt" in node.value
                and " " not in node.value.strip()
            ):
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert {f.split(":")[0] for f in found} <= {"core/runfiles/layout.py"}, found


def _strategy_tests(tree: ast.Module) -> list[tuple[int, str]]:
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                values = []
                if isinstance(side, ast.Constant) and isinstance(side.value, str):
                    values = [side.value]
                elif isinstance(side, (ast.Tuple, ast.List, ast.Set)):
                    values = [e.value for e in side.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                if STRATEGY_NAMES & set(values):
                    hits.append((node.lineno, ast.unparse(node)))
                    break
    return hits


def test_no_strategy_name_is_tested_outside_the_strategies() -> None:
    found = [
        f"{rel}:{line} {code}"
        for rel, tree, _text in SOURCES
        if not rel.startswith("core/strategies/")
        for line, code in _strategy_tests(tree)
    ]
    assert found == []


@pytest.mark.parametrize(
    "code, caught",
    [("if s == 'sweep': pass", True), ("x = s in ('ddp', 'single')", True), ("if s == 'sweeping': pass", False)],
)
def test_the_strategy_name_check_sees_what_it_should(code: str, caught: bool) -> None:
    assert bool(_strategy_tests(ast.parse(code))) is caught
