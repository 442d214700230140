"""The run's pieces (core/session/machinery) report to the session through its RunContext.

What they learn that the session shows (its error, best evaluation, stop reason, summary, a search's adopted
config) they write into the context's RunFacts; none of them assigns a field of the session, so the session
stays the one owner of its state. A check of their source (an AST walk), and a check of the check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
MACHINERY = sorted((ROOT / "core" / "session" / "machinery").glob("*.py"))
assert MACHINERY, ROOT  # the walk below would pass on no file at all


def _session_names(tree: ast.AST) -> set[str]:
    """Names bound to the session: a parameter named ``session`` or typed ``Session``, and every name assigned
    from ``<x>.session`` (also paired in a tuple: ``s, ctx = self.session, self.ctx``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            typed = node.annotation is not None and "Session" in ast.unparse(node.annotation)
            if node.arg == "session" or typed:
                names.add(node.arg)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (
                    list(zip(target.elts, node.value.elts))
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(target, node.value)]
                )
                for name, value in pairs:
                    if isinstance(name, ast.Name) and isinstance(value, ast.Attribute) and value.attr == "session":
                        names.add(name.id)
    return names


def _is_session(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and node.attr == "session"


def _writes_session(target: ast.expr, names: set[str]) -> bool:
    """``target`` is an attribute of the session, or a part of one (``s.best["value"]``)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_writes_session(t, names) for t in target.elts)
    if isinstance(target, ast.Starred):
        return _writes_session(target.value, names)
    node: ast.expr = target
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and _is_session(node.value, names):
            return True
        node = node.value
    return False


def session_assignments(source: str) -> list[str]:
    """The lines of ``source`` that assign a field of the session (``=``, ``+=``, ``setattr``)."""
    tree = ast.parse(source)
    names = _session_names(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("setattr", "object.__setattr__") and node.args:
            if _is_session(node.args[0], names):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
            continue
        if any(_writes_session(t, names) for t in targets):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", MACHINERY, ids=lambda p: p.name)
def test_no_piece_of_the_run_assigns_a_field_of_the_session(path: Path) -> None:
    assert session_assignments(path.read_text()) == []


@pytest.mark.parametrize(
    "line",
    [
        "s.error = message",
        "s.best = {'value': 1}",
        "s.best['value'] = 1",
        "s.config, self.ctx.models = config, [model]",
        "self.session.summary = summary",
        "session.stop_reason = reason",
        "s.stats.done[0] = rec",
        "s.num_parameters += 1",
        "setattr(s, 'error', message)",
    ],
)
def test_the_check_finds_an_assignment_to_the_session(line: str) -> None:
    source = (
        "class Piece:\n"
        "    def __init__(self, session: Session, ctx: RunContext) -> None:\n"
        "        self.session = session\n"
        "        self.ctx = ctx\n"
        "    def react(self, message, reason, summary, config, model, rec) -> None:\n"
        "        s, ctx = self.session, self.ctx\n"
        f"        {line}\n"
    )
    assert len(session_assignments(source)) == 1


def test_the_check_leaves_the_context_and_the_piece_alone() -> None:
    source = (
        "class Piece:\n"
        "    def __init__(self, session: Session, ctx: RunContext) -> None:\n"
        "        self.session = session\n"
        "        self.ctx = ctx\n"
        "    def react(self, message) -> None:\n"
        "        s, ctx = self.session, self.ctx\n"
        "        ctx.facts.error = message\n"
        "        self.ctx.facts.best = None\n"
        "        self._seen = s.stats.done\n"
    )
    assert session_assignments(source) == []
