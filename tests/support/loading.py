"""Import a module from a `layoutc compile` output folder (a package with its `_runtime/`)."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

_COUNTER = itertools.count()


def load_generated(out_dir: Path | str, name: str, package: str | None = None) -> ModuleType:
    """Import `out_dir` as a fresh, uniquely named package and return its module `name`.

    Raises ImportError when the folder is not a complete compile output.
    """
    folder = Path(out_dir)
    pkg = package or f"_layoutc_out_{next(_COUNTER)}"
    if pkg not in sys.modules:
        spec = importlib.util.spec_from_file_location(pkg, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {folder} as a package")
        module = importlib.util.module_from_spec(spec)
        sys.modules[pkg] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{pkg}.{name}")
