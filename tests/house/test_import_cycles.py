"""0 import circles in `layoutc/` (issue 41 item 5), read statically: every import statement of
every module, at module level and inside functions, is an edge (tests/support/import_graph.py says how
package `__init__` files count). A failure names each cycle, edge by edge, with file:line.

The self-tests hold the reader to the cases it must tell apart on a package written here: a
circle closed by an import inside a function, one closed through a package `__init__` that
re-exports its submodules, and the false one a sibling import inside such a package is not.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.support.import_graph import cycles, describe, edges

ROOT = Path(__file__).resolve().parents[2]


def test_layoutc_has_no_import_cycles() -> None:
    found = cycles(edges(ROOT, "layoutc"))
    assert not found, "import cycles in layoutc/:\n" + "\n".join(describe(c) for c in found)


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_a_circle_closed_inside_a_function_is_a_circle(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "def f():\n    from pkg.high import g\n    return g\n",
            "pkg/high.py": "from pkg.low import f\n\ndef g():\n    return f\n",
        },
    )
    found = cycles(edges(root, "pkg"))
    assert len(found) == 1
    text = describe(found[0])
    assert "pkg/low.py:2, function" in text and "pkg/high.py:1, module" in text, text


def test_relative_imports_and_type_checking_imports_count(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
            "pkg/b.py": "from . import a\nclass B: ...\n",
        },
    )
    assert [c.members for c in cycles(edges(root, "pkg"))] == [("pkg.a", "pkg.b")]


def test_package_reexports_are_cycles_only_through_names(tmp_path: Path) -> None:
    files = {
        "pkg/__init__.py": "from pkg.x import f\nfrom pkg.y import g\n",
        "pkg/x.py": "from pkg import y\n\ndef f():\n    return y.g\n",
        "pkg/y.py": "def g(): ...\n",
        "other/__init__.py": "",
        "other/user.py": "from pkg.y import g\n",
    }
    # a sibling import inside the package: its __init__ already runs when x does, no cycle
    assert cycles(edges(_package(tmp_path / "a", files), "pkg")) == []
    # importing a name the __init__ re-exports, from inside the package: a real cycle
    files["pkg/y.py"] = "from pkg import f\n\ndef g(): ...\n"
    found = cycles(edges(_package(tmp_path / "b", files), "pkg"))
    assert [c.members for c in found] == [("pkg", "pkg.x", "pkg.y")], found
    assert "-> pkg (pkg/y.py:1, module)" in describe(found[0])


def test_an_outside_importer_runs_the_packages_init(tmp_path: Path) -> None:
    # top.low imports top.pkg.leaf: that runs top/pkg/__init__.py, which imports top.high,
    # which imports top.low: a cycle at run time although leaf itself imports nothing
    root = _package(
        tmp_path,
        {
            "top/__init__.py": "",
            "top/low.py": "from top.pkg.leaf import X\n",
            "top/pkg/__init__.py": "from top.pkg.leaf import X\nfrom top.high import H\n",
            "top/pkg/leaf.py": "X = 1\n",
            "top/high.py": "from top.low import X\nH = X\n",
        },
    )
    found = cycles(edges(root, "top"))
    assert len(found) == 1 and "top.pkg (top/low.py:1, package)" in describe(found[0]), found


def test_import_module_by_name_counts(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/registry.py": (
                "import importlib\n\ndef load(n):\n    return importlib.import_module(f'pkg.props.{n}')\n"
            ),
            "pkg/props/__init__.py": "",
            "pkg/props/one.py": "from pkg.registry import load\n",
        },
    )
    found = cycles(edges(root, "pkg"))
    assert [c.members for c in found] == [("pkg.props.one", "pkg.registry")], found
    assert "pkg/registry.py:4, import_module" in describe(found[0])
