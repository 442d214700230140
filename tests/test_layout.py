"""The suite's layout: tests/core and tests/app mirror the packages they test (tests/core/session/ holds the tests
of core/session/), journeys across the product live in tests/journeys/, and every folder of tests is a package
(so two test files may share a name in different folders)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIRRORED = ("core", "app")  # tests/<name>/... mirrors <name>/...
JOURNEYS = "journeys"


def misplaced(root: Path) -> list[str]:
    """Test files of ``root``/tests that are not where the layout puts them, each with the reason."""
    tests = root / "tests"
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        top = rel.parts[0]
        if top == "data" or len(rel.parts) == 1:  # the corpus's files; the suite-wide checks (this file)
            continue
        if top in MIRRORED:
            package = root.joinpath(*rel.parts[:-1])
            if not (package / "__init__.py").is_file():
                found.append(f"tests/{rel.as_posix()}: {package.relative_to(root).as_posix()}/ is no package")
        elif top != JOURNEYS:
            found.append(f"tests/{rel.as_posix()}: not under tests/core, tests/app or tests/journeys")
    return found


def folders_without_init(root: Path) -> list[str]:
    """Folders of ``root``/tests holding test files (or below such) that are no package."""
    tests = root / "tests"
    folders = {p.parent for p in tests.rglob("test_*.py") if "data" not in p.relative_to(tests).parts}
    needed = {f for folder in folders for f in (folder, *folder.parents) if f == tests or tests in f.parents}
    return sorted(f.relative_to(root).as_posix() for f in needed if not (f / "__init__.py").is_file())


def test_core_and_app_tests_mirror_their_packages_and_journeys_have_their_folder() -> None:
    assert misplaced(ROOT) == []


def test_every_folder_of_tests_is_a_package() -> None:
    assert folders_without_init(ROOT) == []


def test_a_test_in_a_folder_that_mirrors_nothing_is_found(tmp_path: Path) -> None:
    for package in ("core", "core/session", "tests", "tests/core", "tests/core/session", "tests/core/sessions"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    for test in ("core/session/test_ok.py", "core/sessions/test_astray.py", "walks/test_walk.py"):
        (tmp_path / "tests" / test).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / test).write_text("")
    assert misplaced(tmp_path) == [
        "tests/core/sessions/test_astray.py: core/sessions/ is no package",
        "tests/walks/test_walk.py: not under tests/core, tests/app or tests/journeys",
    ]
    assert folders_without_init(tmp_path) == ["tests/walks"]
