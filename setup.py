"""Which packages the wheel holds: found, never listed (issue 41 item 5).

`layoutc` and every folder under it are found by setuptools' own discovery
(`find_namespace_packages`, include `layoutc*`: a folder of package data without an
`__init__.py`, compiler/emit/templates and tools/models, is a package too). Three folders are
published under another name: `generated/` as `layoutc_generated`, `contracts/` as
`layoutc_contracts` and `docs/` as `layoutc_docs`; their subfolders (generated/_runtime,
generated/_runtime/glue, ...) are found the same way inside each folder and renamed.

This is a setup.py, not `[tool.setuptools.packages.find]` in pyproject.toml, because that
table cannot rename a folder and, where pyproject.toml sets `packages`, it replaces whatever
setup.py gives (setuptools applies pyproject.toml last): with `find` alone the wheel held no
`layoutc_generated`. Everything else (metadata, package data, entry points) is pyproject.toml's.
tests/house/test_packaging.py holds the list to the tree; tests/house/test_wheel_run.py installs the wheel.
"""

from __future__ import annotations

from setuptools import find_namespace_packages, setup

#: installed name -> the folder that holds it
RENAMED = {"layoutc_generated": "generated", "layoutc_contracts": "contracts", "layoutc_docs": "docs"}
#: never a package: bytecode caches
EXCLUDE = ["__pycache__", "*.__pycache__"]


def packages(root: str = ".") -> list[str]:
    """Every package of the wheel, found under `root` (the project folder): layoutc's, then
    each renamed folder and its subfolders."""
    found = find_namespace_packages(root, include=["layoutc", "layoutc.*"], exclude=EXCLUDE)
    for name, folder in RENAMED.items():
        subs = find_namespace_packages(f"{root}/{folder}", exclude=EXCLUDE)
        found += [name, *(f"{name}.{sub}" for sub in subs)]
    return sorted(found)


if __name__ == "__main__":
    setup(packages=packages(), package_dir=RENAMED)
