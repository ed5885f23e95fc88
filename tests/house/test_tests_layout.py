"""The tests folder is laid out like the package (issue 41 item 5).

Test modules sit in one folder per part: tests/compiler, tests/runtime, tests/tools, tests/engine,
tests/conformance, and tests/house (rules over the whole repository). Every helper module (imported
by tests, run as a script or with `python -m`) sits in the tests/support package. tests/cases holds
data. conftest.py and __init__.py may sit anywhere; every folder that holds Python is a package, but
for a sitecustomize.py's (tests/support/engine/site: a folder put on a child's PYTHONPATH, not imported).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_FOLDERS = ("compiler", "runtime", "tools", "engine", "conformance", "house")
ANYWHERE = ("__init__.py", "conftest.py")


def misplaced(tests: Path) -> list[str]:
    """Every .py file under `tests` (a tests folder; tests/cases and __pycache__ skipped) that breaks
    the layout, with the reason, as `path: reason` relative to `tests`' parent. Empty when laid out."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        rel = path.relative_to(tests)
        if rel.parts[0] == "cases" or "__pycache__" in rel.parts:
            continue
        where = f"{path.relative_to(tests.parent).as_posix()}"
        if path.name != "sitecustomize.py" and not (path.parent / "__init__.py").is_file():
            found.append(f"{where}: its folder is not a package (no __init__.py)")
        if path.name in ANYWHERE:
            continue
        if path.name.startswith("test_"):
            if len(rel.parts) == 1:
                found.append(f"{where}: a test module directly in tests/ (put it in one of {', '.join(TEST_FOLDERS)})")
            elif rel.parts[0] not in TEST_FOLDERS or len(rel.parts) != 2:
                found.append(f"{where}: a test module outside tests/{{{','.join(TEST_FOLDERS)}}}/")
        elif rel.parts[0] != "support":
            found.append(f"{where}: a helper module outside tests/support/")
    return found


def test_the_tests_folder_is_laid_out_like_the_package() -> None:
    assert misplaced(ROOT / "tests") == []


def test_the_rule_sees_each_kind_of_misplaced_file(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    for rel in (
        "__init__.py",
        "conftest.py",
        "tools/__init__.py",
        "tools/test_ok.py",
        "support/__init__.py",
        "support/helper.py",
        "cases/x.py",
        "test_top.py",
        "helper_top.py",
        "tools/helper_here.py",
        "misc/__init__.py",
        "misc/test_elsewhere.py",
        "engine/test_no_package.py",
        "support/test_in_support.py",
        "support/site/sitecustomize.py",
    ):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("", encoding="utf-8")
    assert [line.split(":")[0] for line in misplaced(tests)] == [
        "tests/engine/test_no_package.py",
        "tests/helper_top.py",
        "tests/misc/test_elsewhere.py",
        "tests/support/test_in_support.py",
        "tests/test_top.py",
        "tests/tools/helper_here.py",
    ]
