"""The size of the generated modules: lines per module and the lines every module repeats.

    python -m tests.support.module_size [DIR]   # DIR: a generated package (default generated/)

For each module of the package (its `*.py` but `__init__.py`): its lines, its non-blank lines
and how many of those stand verbatim (the same text, indentation included) in every module
of the package. A line every module holds is glue a reader skims past and a vendor copies
23 times: issue 41 item 4 asks for it to live in the shared `_runtime/`.
tests/compiler/test_module_layout.py holds the current generated/ to the bounds it states.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Size:
    """One module: its lines, non-blank lines, and non-blank lines verbatim in every module."""

    name: str
    lines: int
    nonblank: int
    shared: int


def _texts(root: Path) -> dict[str, list[str]]:
    return {
        p.stem: p.read_text(encoding="utf-8").splitlines() for p in sorted(root.glob("*.py")) if p.stem != "__init__"
    }


def sizes(root: Path) -> list[Size]:
    """The `Size` of every module of the package in `root`, by name."""
    texts = _texts(root)
    common: set[str] | None = None
    for lines in texts.values():
        present = {line for line in lines if line.strip()}
        common = present if common is None else common & present
    common = common or set()
    return [
        Size(name, len(lines), sum(1 for x in lines if x.strip()), sum(1 for x in lines if x.strip() and x in common))
        for name, lines in texts.items()
    ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else ROOT / "generated"
    table = sizes(root)
    print(f"{'module':36} {'lines':>6} {'non-blank':>9} {'in all':>6}")
    for s in sorted(table, key=lambda s: -s.lines):
        print(f"{s.name:36} {s.lines:6} {s.nonblank:9} {s.shared:6}")
    total = sum(s.lines for s in table)
    print(f"{len(table)} modules, {total} lines; distinct lines in all: {len(_common(root))}")
    return 0


def _common(root: Path) -> set[str]:
    sets = [{line for line in lines if line.strip()} for lines in _texts(root).values()]
    return set.intersection(*sets) if sets else set()


if __name__ == "__main__":
    sys.exit(main())
