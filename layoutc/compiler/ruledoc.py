"""`layoutc rule LCxxx`: a diagnostic code's documentation, from docs/language.md.

The text is read from ``docs/language.md`` in a source checkout, else from the
installed data package ``layoutc_docs`` (pyproject.toml ships the file), so a
non-editable install prints the same thing. Standard library only.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from layoutc.compiler.diagnostics import CODES

__all__ = ["language_doc", "rule_text"]


def language_doc() -> str | None:
    """The text of docs/language.md, or None when neither copy is found."""
    root = Path(__file__).resolve().parents[2]  # a checkout's root, or (installed) site-packages
    candidates = [root / "docs" / "language.md"] if _is_checkout(root) else []  # the checkout's docs/ first
    try:
        spec = importlib.util.find_spec("layoutc_docs")
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        candidates += [Path(p) / "language.md" for p in spec.submodule_search_locations or []]
    for path in candidates:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    return None


def _is_checkout(root: Path) -> bool:
    """`root` is a layoutc source checkout (its pyproject.toml names the project), not the
    site-packages of an install, whose docs/ may belong to any other distribution."""
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(r'^name\s*=\s*"layoutc"\s*$', text, re.MULTILINE) is not None


def _cells(row: str) -> list[str]:
    # split a markdown table row on unescaped pipes
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def rule_text(code: str) -> str | None:
    """The documentation of ``code`` (``LC201``; case-insensitive): its meaning, the
    example message from the code table, and each section of docs/language.md that
    mentions it. None for an unknown code."""
    code = code.strip().upper()
    if code not in CODES:
        return None
    out = [f"{code}: {CODES[code]}"]
    doc = language_doc()
    if doc is None:
        out.append("")
        out.append("(docs/language.md is not installed; the line above is the registry's summary)")
        return "\n".join(out) + "\n"
    heading = ""
    mentions: list[str] = []
    for line in doc.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            continue
        if f"`{code}`" not in line:
            continue
        if line.startswith(f"| `{code}` |"):
            cells = _cells(line)
            if len(cells) >= 3:
                out.append("")
                out.append(f"meaning: {cells[1]}")
                out.append(f"example: {cells[2]}")
            continue
        mentions.append(f"  [{heading}] {line.strip()}")
    if mentions:
        out.append("")
        out.append("in docs/language.md:")
        out.extend(mentions)
    return "\n".join(out) + "\n"
