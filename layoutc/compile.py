"""`layoutc compile`: verify, render and write (or `--check`) the generated modules.

Every module is rendered in memory first; only then are files written, each
through a temporary file in the same directory and an atomic `os.replace`, so
an interrupted or failed compile leaves every earlier file intact, and two
concurrent compiles each leave complete files.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
import tempfile
from pathlib import Path

from . import ir
from .emit import VERSION_PREFIX, render, render_init


def display_path(path: str) -> str:
    """The contract path as recorded in headers: `<parent dir>/<file>`, independent of the CWD."""
    p = Path(path).resolve()
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def render_all(contracts: list[tuple[str, ir.Contract]], verify_first: bool,
               use_cache: bool = True) -> tuple[dict[str, str] | None, int]:
    """Render every module; returns (files by name, exit code if verification failed).

    Verdicts come from the verdict cache where `layoutc verify` already proved the same text."""
    from .verdict_cache import verify_cached
    files: dict[str, str] = {}
    names: dict[str, str] = {}
    for path, contract in contracts:
        if contract.name in names:
            sys.stderr.write(f"{path}: error: contract `{contract.name}` is also defined in {names[contract.name]}\n")
            return None, 1
        names[contract.name] = path
        proved: tuple[str, ...] = ()
        if verify_first:
            verdicts = verify_cached(contract, use_cache=use_cache)
            bad = [v for v in verdicts if v.status not in ("proved", "info")]
            if bad:
                for v in bad:
                    sys.stderr.write(f"{path}: {v.property}: {v.status}: {v.detail}\n")
                sys.stderr.write(f"{path}: not compiled: run `layoutc verify {path}` for the counterexample\n")
                return None, 2 if all(v.status == "inconclusive" for v in bad) else 1
            proved = tuple(v.property for v in verdicts if v.status == "proved")
        files[f"{contract.name}.py"] = render(contract, display_path(path), proved)
    files["__init__.py"] = render_init([c.name for _, c in contracts])
    return files, 0


def _normalize(text: str) -> list[str]:
    return [line for line in text.splitlines(keepends=True) if not line.startswith(VERSION_PREFIX)]


def check_drift(files: dict[str, str], out_dir: str) -> int:
    """Compare rendered files with `out_dir`; print a unified diff; 1 on any drift."""
    drift = False
    existing = set()
    if os.path.isdir(out_dir):
        existing = {f for f in os.listdir(out_dir) if f.endswith(".py")}
    for name in sorted(files):
        path = os.path.join(out_dir, name)
        if name not in existing:
            print(f"missing: {path}")
            drift = True
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            current = fh.read()
        if _normalize(current) != _normalize(files[name]):
            print(f"modified: {path}")
            sys.stdout.writelines(difflib.unified_diff(current.splitlines(keepends=True),
                                                       files[name].splitlines(keepends=True),
                                                       fromfile=f"{path} (on disk)",
                                                       tofile=f"{path} (compiled)"))
            drift = True
    for name in sorted(existing - set(files)):
        print(f"extra: {os.path.join(out_dir, name)}")
        drift = True
    if not drift:
        print(f"{out_dir}: {len(files)} file(s) up to date")
    return 1 if drift else 0


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` via a temporary file in the same directory and os.replace."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".layoutc-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _remove_stale_temporaries(out_dir: str, age_s: float = 600.0) -> None:
    """Temporaries a killed compile left behind (never imported: not *.py); older than
    `age_s` so that a concurrent compile's live temporaries are kept."""
    import time

    now = time.time()
    for name in os.listdir(out_dir):
        if name.startswith(".layoutc-") and name.endswith(".tmp"):
            path = os.path.join(out_dir, name)
            try:
                if now - os.path.getmtime(path) > age_s:
                    os.unlink(path)
            except OSError:
                pass


def compile_contracts(contracts: list[tuple[str, ir.Contract]], out_dir: str, *, check: bool,
                      verify_first: bool = True, use_cache: bool = True) -> int:
    files, status = render_all(contracts, verify_first, use_cache)
    if files is None:
        return status
    if check:
        return check_drift(files, out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
        _remove_stale_temporaries(out_dir)
        # Modules first and __init__.py last: a run killed midway never leaves an
        # __init__ that names a module not yet written.
        for name in sorted(files, key=lambda n: (n == "__init__.py", n)):
            write_atomic(os.path.join(out_dir, name), files[name])
    except OSError as exc:
        sys.stderr.write(f"layoutc: error: cannot write to {out_dir}: {exc.strerror or exc}\n")
        return 2
    for name in sorted(files):
        print(f"wrote {os.path.join(out_dir, name)}")
    return 0
