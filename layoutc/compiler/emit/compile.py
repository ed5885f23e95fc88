"""`layoutc compile`: verify, render and write (or `--check`) the generated modules.

Every module is rendered in memory first; only then is the package written, whole,
into a directory next to the output directory and swapped in at once
(`publish.py`): a failed or interrupted compile (a full disk, an exception, a kill)
leaves the output directory as it was, old and new modules never mix, and two
concurrent compiles each leave one complete package.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

from layoutc.compiler import ir
from layoutc.compiler.diagnostics import Diagnostic, error, file_span
from layoutc.compiler.emit.publish import publish
from layoutc.compiler.emit.render import VERSION_PREFIX, render, render_init
from layoutc.compiler.glues import runtime_files

RUNTIME_DIR = "_runtime"

MAX_GENERATED_BYTES = 16 << 20  # a generated module is tens of KiB; more is not ours


def display_path(path: str) -> str:
    """The contract path as recorded in headers: `<parent dir>/<file>`, independent of the CWD."""
    p = Path(path).resolve()
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def render_all(contracts: list[tuple[str, ir.Contract]], verify_first: bool, use_cache: bool = True
               ) -> tuple[dict[str, str] | None, int, list[Diagnostic]]:
    """Render every module in memory.

    Returns (files by name or None, exit code, diagnostics): a duplicate contract name
    is LC702 (exit 2); a verification finding is LC601/LC602 (exit 1) or LC603
    inconclusive (exit 2, when every finding is inconclusive); a verifier failure LC900.
    Verdicts come from the verdict cache where `layoutc verify` already proved the same text.
    """
    from layoutc.compiler.verify.driver import verify_contracts
    from layoutc.compiler.verify.report import findings
    files: dict[str, str] = {}
    names: dict[str, str] = {}
    for path, contract in contracts:
        if contract.name in names:
            return None, 2, [error("LC702", file_span(path), f"contract `{contract.name}` is also defined in "
                                   f"{names[contract.name]}; each generated module is named after its contract")]
        names[contract.name] = path
        proved: tuple[str, ...] = ()
        if verify_first:
            results, failures = verify_contracts([(path, contract)], use_cache=use_cache)
            if failures:
                return None, 2, failures
            verdicts = results[0][2]
            bad = [v for v in verdicts if v.status not in ("proved", "info")]
            if bad:
                diags = [d for d in findings(results) if d.severity == "error"]
                return None, 2 if all(v.status == "inconclusive" for v in bad) else 1, diags
            proved = tuple(v.property for v in verdicts if v.status == "proved")
        files[f"{contract.name}.py"] = render(contract, display_path(path), proved)
    for rel, text in runtime_files():
        header = (f"# Copied by `layoutc compile` from layoutc/runtime/{rel}. DO NOT EDIT: it is the\n"
                  "# shared runtime of every module in this package; edit layoutc's source.\n")
        files[f"{RUNTIME_DIR}/{rel}"] = header + text
    files["__init__.py"] = render_init([c.name for _, c in contracts])
    return files, 0, []


def _normalize(text: str) -> list[str]:
    return [line for line in text.splitlines(keepends=True) if not line.startswith(VERSION_PREFIX)]


def check_drift(files: dict[str, str], out_dir: str, *, show: bool = True) -> tuple[int, list[Diagnostic]]:
    """Compare rendered files with `out_dir`; 1 and an LC701 per file on any drift.

    With ``show`` (text output), the unified diff and a summary go to stdout. Files
    are read through ``safeio.read_bounded`` (a FIFO or device in `out_dir` is drift,
    not a hang).
    """
    from layoutc.compiler.safeio import ReadError, read_bounded
    diags: list[Diagnostic] = []
    existing = set()
    if os.path.isdir(out_dir):
        for folder, dirs, names in os.walk(out_dir):
            dirs[:] = [d for d in dirs if d == RUNTIME_DIR or folder != out_dir]
            dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
            rel = os.path.relpath(folder, out_dir)
            existing |= {n if rel == "." else f"{rel}/{n}" for n in names if n.endswith(".py")}
    for name in sorted(files):
        path = os.path.join(out_dir, name)
        if name not in existing:
            if show:
                print(f"missing: {path}")
            diags.append(error("LC701", file_span(path), f"missing: {path} is not generated yet",
                               help="run `layoutc compile` without --check"))
            continue
        try:
            current = read_bounded(path, MAX_GENERATED_BYTES).decode("utf-8", errors="replace")
        except ReadError as exc:
            diags.append(error("LC701", file_span(path), f"modified: {path} cannot be read ({exc.reason})"))
            continue
        if _normalize(current) != _normalize(files[name]):
            old, new = current.splitlines(keepends=True), files[name].splitlines(keepends=True)
            first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
            diags.append(error("LC701", file_span(path, first + 1), f"modified: {path} differs from what its "
                               "contract compiles to", help="run `layoutc compile` without --check"))
            if show:
                print(f"modified: {path}")
                sys.stdout.writelines(difflib.unified_diff(old, new, fromfile=f"{path} (on disk)",
                                                           tofile=f"{path} (compiled)"))
    for name in sorted(existing - set(files)):
        path = os.path.join(out_dir, name)
        if show:
            print(f"extra: {path}")
        diags.append(error("LC701", file_span(path), f"extra: {path} has no contract"))
    if not diags and show:
        print(f"{out_dir}: {len(files)} file(s) up to date")
    return (1 if diags else 0), diags


def compile_contracts(contracts: list[tuple[str, ir.Contract]], out_dir: str, *, check: bool,
                      verify_first: bool = True, fmt: str = "text", use_cache: bool = True
                      ) -> tuple[int, list[Diagnostic]]:
    """Verify, render and write (or compare with ``--check``) every module.

    Returns (exit code, diagnostics); the caller prints the diagnostics. Text output
    (``fmt == "text"``) also prints what was written, or the drift diff.
    """
    files, status, diags = render_all(contracts, verify_first, use_cache)
    if files is None:
        return status, diags
    if check:
        return check_drift(files, out_dir, show=fmt == "text")
    try:
        publish(files, out_dir)  # staged next to out_dir, then swapped in whole
    except OSError as exc:
        return 2, [error("LC702", file_span(out_dir), f"cannot write to {out_dir}: {exc.strerror or exc}; "
                         "nothing was written")]
    if fmt == "text":
        for name in sorted(files):
            print(f"wrote {os.path.join(out_dir, name)}")
    return 0, []
