"""One runtime per process: a copied runtime module adopts layoutc's own, when it is the same text.

`layoutc compile` copies this package into every generated package as `_runtime/`, so a
generated package runs with torch only. Imported beside layoutc, that would make two
classes of everything: `except mod.LayoutContractError` would miss the error layoutc's
loader raises, and `mod.LAYOUT` would not be a `layoutc.runtime.interface.ModuleLayout`.

The modules that define what crosses between a generated module and layoutc (`errors`,
`interface`, `packed`, `experts`) end with `adopt(globals())`. In layoutc itself it does
nothing. In a copy, it finds layoutc's runtime folder and, only when every file of the
copied runtime (the glues it holds included) is exactly layoutc's file of the same name
below the copy's header, replaces every name the copy's module defined with layoutc's
object: the copy is then a view of layoutc's module, each class exists once in the
process, and the code around them is the same code. Where layoutc is not installed, or
is another version whose text differs in any file, the copy keeps its own classes (a class
is never swapped for one of another shape). Standard library only; layoutc's modules are
imported only when the texts are equal.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from typing import Any

HOME = "layoutc.runtime"


def _body(path: str) -> str | None:
    """The file's text below its leading comment lines (the copy's `# Copied by` header), or
    None when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
    except (OSError, UnicodeDecodeError):
        return None
    start = 0
    while start < len(lines) and lines[start].startswith("#"):
        start += 1
    return "".join(lines[start:])


def _runtime_dir() -> str | None:
    """layoutc's runtime folder, found without importing anything but its two empty packages."""
    try:
        spec = importlib.util.find_spec(HOME)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


@functools.cache
def _same_runtime(copy_dir: str, home_dir: str) -> bool:
    """Whether every runtime file of the copy in `copy_dir` (the glues it holds included) has
    exactly the text of layoutc's file of the same name in `home_dir`."""
    if os.path.realpath(copy_dir) == os.path.realpath(home_dir):
        return False
    found = False
    for sub in ("", "glue"):
        folder = os.path.join(copy_dir, sub)
        if not os.path.isdir(folder):
            continue
        for entry in sorted(os.listdir(folder)):
            if not entry.endswith(".py"):
                continue
            ours, theirs = _body(os.path.join(folder, entry)), _body(os.path.join(home_dir, sub, entry))
            if ours is None or ours != theirs:
                return False
            found = True
    return found


def twin(name: str, file: str | None) -> Any | None:
    """layoutc's module that the runtime module `name` (defined by `file`) is a copy of, or
    None: `name` is layoutc's own, layoutc is not importable, or the copied runtime's text
    differs from layoutc's in any file."""
    package, _, leaf = name.rpartition(".")
    if package == HOME or not leaf or file is None:
        return None
    home = _runtime_dir()
    if home is None or not _same_runtime(os.path.dirname(os.path.abspath(file)), home):
        return None
    return importlib.import_module(f"{HOME}.{leaf}")


def adopt(namespace: dict[str, Any]) -> None:
    """Make the module whose globals are `namespace` a view of its layoutc twin (see the
    module docstring); call it last in the module."""
    found = twin(namespace["__name__"], namespace.get("__file__"))
    if found is None:
        return
    for key, value in vars(found).items():
        if not key.startswith("__"):
            namespace[key] = value
