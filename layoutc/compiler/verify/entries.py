"""Verification entries of the verdict cache: their keys and their JSON form.

A verdict is a function of the contract's text, the code that checks and proves it (every
module and the grammar under layoutc/compiler, every layoutc module they import, e.g.
runtime/algebra.py, and the glue modules whose INTERFACE the checker reads: hashed, so an
edited checkout never reuses a stale verdict; :func:`covered_files`), the solver (z3's Python modules and library file), the Python version,
the solver options and the pinned parameters (`fixed`). :func:`key` hashes all of them.
An entry holds the contract's name, its checker diagnostics (None where the caller had
none to give: `layoutc compile` verifies contracts it checked itself) and its verdicts;
spans are stored without their file and re-attached to the path being verified. A
cached verdict keeps the `seconds` and `queries` of the run that produced it.

No z3, no parser: a fully cached `layoutc verify` imports neither.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from layoutc import __version__
from layoutc.compiler.diagnostics import Diagnostic, Related, Span
from layoutc.compiler.verify.registry import PROPERTY_IDS
from layoutc.compiler.verify.verdicts import STATUSES, Counterexample, Options, Verdict

FORMAT = 2
PACKAGE = Path(__file__).resolve().parents[2]  # the layoutc package
COMPILER = PACKAGE / "compiler"
_code_digest: str | None = None
_covered: tuple[Path, ...] | None = None
# An import statement, wherever it is (module level or inside a function, after a `;` or a
# one-line `if ...:` / `try:`, over backslash-continued lines): `from X import names` (names
# possibly parenthesised over several lines, with comments) or `import X, Y`; and a module
# named as a string literal (`importlib.import_module("layoutc.runtime.vocab")`,
# `__import__(...)`). A match in a string or comment only adds a file; nothing a checker or
# prover imports is missed (a test compares with the modules a verify really loads:
# tests/compiler/test_verdict_cache_key.py; tests/tools/test_hostile_adv40.py the statement forms).
_IMPORT = re.compile(rb"[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\((?:[^)#]|#[^\n]*+)*+\)|[^\n#;]*)"
                     rb"|import[ \t]+([^\n#;]+))")
_CONTINUED = re.compile(rb"\\\r?\n")
_COMMENT = re.compile(rb"#[^\n]*")
_LITERAL = re.compile(rb"""layoutc(?:\.\w+)+(?=["'])""")


def code_digest() -> str:
    """SHA-256 (hex) over every file whose content can change a verdict (:func:`covered_files`),
    z3's files and the Python version. Computed once per process."""
    global _code_digest
    if _code_digest is None:
        h = hashlib.sha256(f"layoutc {__version__} python {sys.version_info[:2]}".encode())
        for path in covered_files():
            with open(path, "rb") as fh:
                h.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + fh.read() + b"\0")
        spec = importlib.util.find_spec("z3")
        if spec is not None and spec.origin:
            z3dir = Path(spec.origin).parent
            for name in ("z3core.py", "z3.py"):
                if (z3dir / name).is_file():
                    h.update((z3dir / name).read_bytes())
            for lib in sorted((z3dir / "lib").glob("libz3*")):
                st = lib.stat()
                h.update(f"{lib.name} {st.st_size} {st.st_mtime_ns}".encode())
        _code_digest = h.hexdigest()
    return _code_digest


def covered_files() -> tuple[Path, ...]:
    """Every file of layoutc whose content can change a verdict, sorted: the compiler's
    modules and grammar (layoutc/compiler/**), the transitive closure of the layoutc
    modules they import (absolute and relative imports, read statically from the source
    text, with every enclosing package's __init__.py: `runtime/algebra.py`, `vocab.py`,
    `interface.py`, ...), and the glue modules whose `INTERFACE` the checker reads as text
    (:func:`layoutc.compiler.gluefiles.interface_files`, the list `glues.registry` reads).
    Computed once per process.

    Raises OSError where a file cannot be read (a broken checkout)."""
    global _covered
    if _covered is None:
        from layoutc.compiler.gluefiles import interface_files

        root = str(PACKAGE.parent) + os.sep
        todo = [os.path.join(COMPILER, rel) for rel in _sources(str(COMPILER), "")]
        seen: set[str] = set()
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            if path.endswith(".py"):
                with open(path, "rb") as fh:
                    package = tuple(os.path.dirname(path)[len(root):].split(os.sep))  # ("layoutc", "runtime")
                    todo += _imported(package, fh.read())
        seen.update(str(p) for p in interface_files())  # read as text, never imported
        _covered = tuple(Path(p) for p in sorted(seen))
    return _covered


def _imported(package: tuple[str, ...], source: bytes) -> list[str]:
    """The layoutc files the import statements of a module of `package` load."""
    out: list[str] = []
    for m in _import_statements(source):
        if m.group(3) is not None:  # import a.b, c as d
            for name in m.group(3).decode("ascii", "replace").split(","):
                if name.split():
                    out += _module_files(tuple(name.split()[0].split(".")))
            continue
        base = m.group(1).decode("ascii", "replace")
        dots = len(base) - len(base.lstrip("."))
        parts = (package[:len(package) - dots + 1] if dots else ()) + tuple(p for p in base.lstrip(".").split(".") if p)
        out += _module_files(parts)
        names = _COMMENT.sub(b"", m.group(2)).decode("ascii", "replace")
        for name in names.strip("() \t\r\n").replace("\n", " ").split(","):
            if name.split():
                out += _module_files((*parts, name.split()[0]))  # `from pkg import module`
    pos = source.find(b"layoutc.")  # a module named by a string: import_module("layoutc.x.y"), __import__
    while pos != -1:
        lit = _LITERAL.match(source, pos) if pos and source[pos - 1] in b"\"'" else None
        if lit is not None:
            out += _module_files(tuple(lit.group(0).decode("ascii").split(".")))
        pos = source.find(b"layoutc.", pos + 1)
    return out


def _import_statements(source: bytes) -> list[re.Match[bytes]]:
    """Every import statement of `source`: the lines holding the word `import`, each matched
    from its start (a search for the word first is several times faster than the regex run
    at every position)."""
    if b"\\" in source:
        source = _CONTINUED.sub(b" ", source)  # a backslash-continued statement is one line
    found = []
    pos = source.find(b"import")
    while pos != -1:
        line = source.rfind(b"\n", 0, pos) + 1
        # the statement starts at its line, or after the last `;` or `:` before the word
        # (`import os; import x`, `if c: import x`, `try: from x import y`)
        start = max(line, source.rfind(b";", line, pos) + 1, source.rfind(b":", line, pos) + 1)
        m = _IMPORT.match(source, start)
        if m is not None and m.end() > pos:
            found.append(m)
            pos = m.end()
        pos = source.find(b"import", pos + 1)
    return found


@functools.cache
def _module_files(parts: tuple[str, ...]) -> tuple[str, ...]:
    """The files that importing module `parts` of layoutc runs: every enclosing package's
    __init__.py and the module itself (none for a module outside layoutc or not a file)."""
    if not parts or parts[0] != "layoutc":
        return ()
    found = []
    parent = str(PACKAGE.parent)
    for name in parts:
        if name + ".py" in _listing(parent):
            found.append(os.path.join(parent, name + ".py"))
        parent = os.path.join(parent, name)
        if "__init__.py" in _listing(parent):
            found.append(os.path.join(parent, "__init__.py"))
    return tuple(found)


@functools.cache
def _listing(folder: str) -> frozenset[str]:
    """The names in `folder` (empty where it is not a readable directory): one listdir per
    folder instead of a stat per candidate file."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def _sources(root: str, rel: str) -> list[str]:
    """The .py and .lark files under root/rel, as sorted paths relative to root (no __pycache__)."""
    out: list[str] = []
    with os.scandir(os.path.join(root, rel)) as found:
        for entry in found:
            name = os.path.join(rel, entry.name) if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    out += _sources(root, name)
            elif entry.name.endswith((".py", ".lark")):
                out.append(name)
    return sorted(out)


def key(text: str, options: Options, fixed: dict[str, Any] | None = None) -> str:
    """The cache key (SHA-256, hex) of verifying `text` under `options` with `fixed` pinned."""
    h = hashlib.sha256(f"layoutc-verdicts {FORMAT}\0{code_digest()}\0".encode())
    h.update(json.dumps(asdict(options), sort_keys=True).encode() + b"\0")
    h.update(json.dumps(sorted((fixed or {}).items()), default=str).encode() + b"\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


@dataclass(frozen=True)
class Entry:
    name: str
    diagnostics: tuple[Diagnostic, ...] | None  # None: not known to the caller that stored it
    verdicts: list[Verdict]


def encode(name: str, diags: Sequence[Diagnostic] | None, verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """The JSON-able value of an entry."""
    return {"name": name, "diagnostics": None if diags is None else [_diag_doc(d) for d in diags],
            "verdicts": [_verdict_doc(v) for v in verdicts]}


def decode(value: Any, file: str) -> Entry | None:
    """The entry of a stored value (spans re-attached to `file`), or None where it is not
    one this module wrote: a wrong shape, an unknown status, the properties out of order,
    or an inconclusive verdict (never stored: it depends on time and load)."""
    try:
        verdicts = [_verdict(v, file) for v in value["verdicts"]]
        if [v.property for v in verdicts] != list(PROPERTY_IDS) or any(v.status == "inconclusive" for v in verdicts):
            return None
        diags = value["diagnostics"]
        return Entry(str(value["name"]), None if diags is None else tuple(_diag(d, file) for d in diags), verdicts)
    except Exception:  # any damage at all (wrong types, missing fields): not trusted
        return None


def _span(s: Span) -> list[int]:
    return [s.line, s.column, s.end_line, s.end_column]


def _unspan(v: Any, file: str) -> Span:
    line, column, end_line, end_column = (int(x) for x in v)
    return Span(file, line, column, end_line, end_column)


def _verdict_doc(v: Verdict) -> dict[str, Any]:
    cex = v.counterexample
    return {"property": v.property, "status": v.status, "detail": v.detail, "seconds": v.seconds,
            "queries": v.queries, "span": _span(v.span), "warnings": list(v.warnings),
            "counterexample": None if cex is None else {
                "config": cex.config, "derived": cex.derived, "message": cex.message, "where": cex.where,
                "picture": list(cex.picture), "rule": cex.rule}}


def _verdict(d: dict[str, Any], file: str) -> Verdict:
    c = d["counterexample"]
    cex = None if c is None else Counterexample(dict(c["config"]), dict(c["derived"]), str(c["message"]),
                                                str(c["where"]), tuple(str(x) for x in c["picture"]), str(c["rule"]))
    if d["status"] not in STATUSES:
        raise ValueError("bad status")
    return Verdict(str(d["property"]), d["status"], str(d["detail"]), float(d["seconds"]), int(d["queries"]),
                   _unspan(d["span"], file), cex, tuple(str(w) for w in d["warnings"]))


def _diag_doc(d: Diagnostic) -> dict[str, Any]:
    return {"code": d.code, "severity": d.severity, "span": _span(d.span), "message": d.message,
            "related": [[_span(r.span), r.message] for r in d.related], "help": d.help}


def _diag(d: dict[str, Any], file: str) -> Diagnostic:
    if d["severity"] not in ("error", "warning", "note"):
        raise ValueError("bad severity")
    return Diagnostic(str(d["code"]), d["severity"], _unspan(d["span"], file), str(d["message"]),
                      tuple(Related(_unspan(s, file), str(m)) for s, m in d["related"]),
                      None if d["help"] is None else str(d["help"]))
