"""The wheel's package list is found, not written (issue 41: the hand list in pyproject.toml left
out `layoutc.tools.quant_run`, so an installed `layoutc run` failed on every quantized checkpoint).

setup.py finds the packages with setuptools' discovery (setup.py says why there and not in a
pyproject.toml table). This test holds what it finds to the tree, walked here independently:
every folder under layoutc/ and generated/ that holds a file (Python or package data), and the
three folders published under another name. tests/house/test_wheel_run.py builds and installs the wheel.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _setup(root: Path = ROOT) -> ModuleType:
    spec = importlib.util.spec_from_file_location("layoutc_setup", root / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines packages(); setup() runs only as __main__
    return module


def _walked(root: Path) -> set[str]:
    renamed = _setup(root).RENAMED
    found: set[str] = set(renamed)
    for name, folder in [("layoutc", root / "layoutc"), *((n, root / f) for n, f in renamed.items())]:
        for path in folder.rglob("*"):
            rel = path.parent.relative_to(folder)
            if path.is_file() and "__pycache__" not in rel.parts:
                found.add(".".join((name, *rel.parts)))
    return found


def test_every_package_in_the_tree_is_found() -> None:
    assert set(_setup().packages(str(ROOT))) == _walked(ROOT)


def test_pyproject_lists_no_packages_by_hand() -> None:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = doc["tool"]["setuptools"]
    # a `packages` list or find table here would replace setup.py's (setuptools applies pyproject last)
    assert "packages" not in setuptools and "package-dir" not in setuptools, setuptools


def test_a_new_package_is_found_without_an_edit(tmp_path: Path) -> None:
    # the hand list's failure: a package added under layoutc/ (as quant_run was) must be found
    (tmp_path / "setup.py").write_bytes((ROOT / "setup.py").read_bytes())
    for rel in (
        "layoutc/__init__.py",
        "layoutc/tools/__init__.py",
        "layoutc/tools/newrun/__init__.py",
        "layoutc/tools/models/x.json",
        "generated/__init__.py",
        "generated/_runtime/__init__.py",
        "generated/_runtime/glue/__init__.py",
        "contracts/a.moe",
        "docs/language.md",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("", encoding="utf-8")
    (tmp_path / "layoutc" / "__pycache__").mkdir()
    (tmp_path / "layoutc" / "__pycache__" / "x.pyc").write_bytes(b"")
    found = set(_setup(tmp_path).packages(str(tmp_path)))
    assert "layoutc.tools.newrun" in found and "layoutc_generated._runtime.glue" in found
    assert found == _walked(tmp_path), found
