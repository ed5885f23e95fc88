"""Rewrite every ``tests/cases/errors/NAME.expected`` from layoutc's current output.

Usage (from anywhere)::

    python tests/support/regen_errors_corpus.py            # rewrite all .expected files
    python tests/support/regen_errors_corpus.py NAME ...   # only these cases (NAME without .moe)

Each ``NAME.expected`` holds the exact stderr of ``layoutc check
tests/cases/errors/NAME.moe`` (text renderer), run in process from the
repository root, exactly as ``tests/compiler/test_errors_corpus.py`` runs it.

This script accepts whatever layoutc prints today. It is NOT a way to make a
failing test pass: a reviewer must read the resulting ``git diff
tests/cases/errors/`` line by line and confirm that every changed message,
code, position and caret is an improvement (or at least still right) before
the new files are committed. Cases whose output is a Python traceback or an
LC900 internal error, or whose exit code is not 1, are reported and not
written.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path("tests") / "cases" / "errors"


def run_check(rel_path: str) -> tuple[int, str, str]:
    """Run `layoutc check rel_path` in process; returns (exit code, stdout, stderr)."""
    from layoutc.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", rel_path])
    return code, out.getvalue(), err.getvalue()


def main(argv: list[str]) -> int:
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    names = argv or sorted(p.stem for p in CORPUS.glob("*.moe"))
    bad = 0
    for name in names:
        rel = (CORPUS / f"{name}.moe").as_posix()
        if not Path(rel).is_file():
            print(f"missing: {rel}", file=sys.stderr)
            bad += 1
            continue
        code, out, err = run_check(rel)
        if code != 1 or "Traceback" in err + out or "LC900" in err + out:
            print(f"NOT written: {rel}: exit {code}\n{err}{out}", file=sys.stderr)
            bad += 1
            continue
        target = CORPUS / f"{name}.expected"
        old = target.read_text(encoding="utf-8") if target.exists() else None
        if old != err:
            with open(target, "w", encoding="utf-8", newline="") as fh:
                fh.write(err)
            print(f"{'updated' if old is not None else 'created'}: {target.as_posix()}")
    print(f"{len(names) - bad} of {len(names)} cases written; now review `git diff {CORPUS.as_posix()}`.")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
