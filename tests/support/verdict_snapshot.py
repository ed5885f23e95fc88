"""Snapshot every verdict of the corpus, to hold a refactoring to "behaviour unchanged".

    python -m tests.support.verdict_snapshot OUT.json            # contracts/ and tests/cases/**/*.moe
    python -m tests.support.verdict_snapshot --diff A.json B.json

For each file: its diagnostics (code, severity, span, message, help, related) and, when it
checks, every property's id, status, line, detail, counterexample (config, derived
values, message, where) and warnings. Times and query counts are left out, and so is the
detail of an inconclusive verdict (which queries ran out of time depends on the load):
they are not part of a verdict. The verdict cache is not used. Exit 0 when --diff finds the
two snapshots equal, 1 when they differ (each difference printed), 2 on bad usage.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def corpus() -> list[Path]:
    """Every contract file the verdicts are held to: the shipped ones and the test corpus."""
    files = sorted((ROOT / "contracts").glob("*.moe")) + sorted((ROOT / "tests" / "cases").rglob("*.moe"))
    return [f for f in files if f.is_file()]


def _cli_json(argv: list[str]) -> Any:
    from layoutc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(argv)
    text = out.getvalue()
    return json.loads(text) if text.strip() else None


def _prop(p: dict[str, Any]) -> dict[str, Any]:
    # An inconclusive verdict's detail says which queries ran out of time or budget, which
    # depends on the machine's load; its status and cause are the verdict.
    drop = ("seconds", "queries", "detail") if p.get("status") == "inconclusive" else ("seconds", "queries")
    return {k: v for k, v in p.items() if k not in drop}


def snapshot_file(path: Path) -> dict[str, Any]:
    rel = str(path.relative_to(ROOT))
    checked = _cli_json(["check", "--format", "json", rel]) or []
    entry: dict[str, Any] = {"diagnostics": checked}
    if not any(d.get("severity") == "error" for d in checked):
        verified = _cli_json(["verify", "--format", "json", "--no-cache", rel]) or {}
        # LC603 (inconclusive) repeats the load-dependent detail: keep its code and span only
        entry["verify_diagnostics"] = [{k: v for k, v in d.items() if d.get("code") != "LC603" or k != "message"}
                                       for d in verified.get("diagnostics", [])]
        entry["properties"] = [_prop(p) for c in verified.get("contracts", []) for p in c.get("properties", [])]
        entry["tool_failures"] = verified.get("tool_failures", [])
    return entry


def snapshot() -> dict[str, Any]:
    import os

    os.chdir(ROOT)
    return {str(f.relative_to(ROOT)): snapshot_file(f) for f in corpus()}


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            out.append(f"{name}: only in {'the second' if name not in a else 'the first'} snapshot")
        elif a[name] != b[name]:
            out.append(f"{name}:\n  before: {json.dumps(a[name], sort_keys=True)[:1500]}\n"
                       f"  after:  {json.dumps(b[name], sort_keys=True)[:1500]}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--diff":
        a, b = (json.loads(Path(p).read_text(encoding="utf-8")) for p in argv[1:])
        found = diff(a, b)
        for line in found:
            print(line)
        print(f"{len(set(a) | set(b))} files, {len(found)} differ")
        return 1 if found else 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    data = snapshot()
    Path(argv[0]).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(data)} files written to {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
