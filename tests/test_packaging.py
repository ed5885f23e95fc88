"""The wheel's package list is every Python package in the tree (issue 41: the hand list in
pyproject.toml left out `layoutc.tools.quant_run`, so an installed `layoutc run` failed on every
quantized checkpoint).

pyproject.toml must list packages by hand: three of them are folders published under another
name (`generated/` as `layoutc_generated`, `contracts/` as `layoutc_contracts`, `docs/` as
`layoutc_docs`), which setuptools' `packages.find` cannot rename, and the project's top level
holds no setup.py. This test is the discovery: it walks the folders and fails on any package
the list leaves out, or lists but does not exist.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _discovered() -> set[str]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    renamed = doc["tool"]["setuptools"]["package-dir"]
    roots = {"layoutc": ROOT / "layoutc", **{name: ROOT / folder for name, folder in renamed.items()}}
    found: set[str] = set()
    for name, folder in roots.items():
        found.add(name)  # a data package (contracts/, docs/) has no __init__.py and is still listed
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            if "__pycache__" not in rel.parts and rel.parts:
                found.add(".".join((name, *rel.parts)))
    return found


def test_every_package_in_the_tree_is_listed() -> None:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(doc["tool"]["setuptools"]["packages"])
    found = _discovered()
    assert found - listed == set(), "packages missing from pyproject.toml [tool.setuptools] packages"
    # a listed folder without __init__.py (compiler/emit/templates: the .j2 files) is package data
    data = {p for p in listed - found if (ROOT / p.replace(".", "/")).is_dir()}
    assert listed - found - data == set(), "pyproject.toml lists packages that do not exist"
