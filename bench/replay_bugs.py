"""Replay public MoE pad bugs against released engine wheels (docs/replay.md).

Full replay (every bug on its last buggy and first fixed release; downloads the wheels):
    python bench/replay_bugs.py [--bug KEY ...] [--json bench/results/replay.json]
Small mode, one release (CI): every bug of that engine against it, expected to pass when the
release is at or past the fix and to fail, naming rows, when it is at or before the bug:
    python bench/replay_bugs.py --against vllm==0.34.0
    python bench/replay_bugs.py --against vllm==installed     (the environment's own vllm)
    LAYOUTC_SGLANG_PATH=.venv-sglang python bench/replay_bugs.py --against sglang==installed

Verdicts per (bug, release): CAUGHT (a bug configuration differs, rows named, and the aligned
control matches), PASS (every configuration matches), WRONG (anything else: a miss, a control
that differs, a crash), UNMODELED (the release is past the rule the contract states: refused by
name, not run), SKIP (the wheel could not be fetched or imported; the command is named;
never a pass). Exit 0 when every verdict is the expected one, 1 when one is not, 2 when none is
wrong but one was skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.replay.bugs import BUGS, Bug  # noqa: E402
from bench.replay.fetch import FetchError, unpacked  # noqa: E402


def _unmodeled(bug: Bug, release: str) -> dict[str, object] | None:
    """The refusal for a release past the rule `bug.contract` states, else None."""
    if release != "installed" and bug.models_upto and Version(release) > Version(bug.models_upto):
        return {
            "unmodeled": f"contract {bug.contract} states the rule of {bug.engine} <= {bug.models_upto}; "
            f"{release} changed {bug.function.split(':')[1]}: not checked"
        }
    return None


def run_children(bugs: list[Bug], release: str) -> list[dict[str, object]]:
    """Each bug's answer against `release` ("installed" or a version); all bugs of one engine.

    The bugs the release is modelled for run in one `bench.replay.child` process (the release is
    imported once); the others are refused by name without a child."""
    answers: dict[str, dict[str, object]] = {}
    run: list[Bug] = []
    for bug in bugs:
        refused = _unmodeled(bug, release)
        if refused is not None:
            answers[bug.key] = refused
        else:
            run.append(bug)
    if run:
        answers.update(_run_child(run, release))
    return [answers[bug.key] for bug in bugs]


def _run_child(bugs: list[Bug], release: str) -> dict[str, dict[str, object]]:
    paths: list[str] = []
    if release != "installed":
        try:
            paths.append(str(unpacked(f"{bugs[0].engine}=={release}")))
            paths += [str(unpacked(req)) for req in dict.fromkeys(w for b in bugs for w in b.extra_wheels)]
        except FetchError as exc:
            return {b.key: {"skip": f"fetch failed: {exc}"} for b in bugs}
    cmd = [sys.executable, "-m", "bench.replay.child", ",".join(b.key for b in bugs), *paths]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800, check=False)
    got: dict[str, dict[str, object]] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            answer = json.loads(line)
            got[str(answer.get("bug"))] = answer
    for bug in bugs:
        out = got.get(bug.key)
        if out is None:
            got[bug.key] = {"skip": f"{' '.join(cmd[2:4])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}"}
        elif "import_error" in out:
            out["skip"] = f"import failed ({bug.function}): {out['import_error']}"
    return got


def run_child(bug: Bug, release: str) -> dict[str, object]:
    """One bug's answer against `release` (see `run_children`)."""
    return run_children([bug], release)[0]


def verdict(bug: Bug, out: dict[str, object]) -> str:
    """CAUGHT / PASS / WRONG / SKIP for one child's answer (see the module docstring)."""
    if "unmodeled" in out:
        return "UNMODELED"
    if "skip" in out:
        return "SKIP"
    rows = out["results"]
    assert isinstance(rows, list)
    if any("error" in r for r in rows):
        return "WRONG"
    *bug_rows, control = rows
    if control["mismatch"]:
        return "WRONG"
    if not any(r["mismatch"] for r in bug_rows):
        return "PASS"
    return "CAUGHT"


def expected(bug: Bug, release: str, installed: str | None) -> str:
    """CAUGHT at or before `bug.buggy`, PASS at or after `bug.fixed` up to `bug.models_upto`,
    UNMODELED past it."""
    if release == "installed" and not installed:  # the engine itself did not import: a named skip
        return "SKIP"
    v = Version(installed if release == "installed" and installed else release)
    if bug.models_upto and v > Version(bug.models_upto):
        return "UNMODELED"
    if v <= Version(bug.buggy):
        return "CAUGHT"
    if v >= Version(bug.fixed):
        return "PASS"
    return "?"


def _show(bug: Bug, release: str, out: dict[str, object], got: str, want: str) -> None:
    mark = "ok " if got == want else ("-- " if got == "SKIP" else "XX ")
    print(
        f"{mark}{bug.key} [{', '.join(bug.reports)}] {bug.engine} {out.get('version', release)}: {got} "
        f"(expected {want})"
    )
    for why in ("skip", "unmodeled"):
        if why in out:
            print(f"     {out[why]}")
    for r in out.get("results", []):  # type: ignore[union-attr]
        status = "differs" if r.get("mismatch") else ("error" if "error" in r else "matches")
        print(f"     {r['config']}: {status}")
        for line in r.get("info", []) + r.get("mismatch", []):
            print(f"       {line}")
        if "error" in r:
            print(f"       {r['error']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bug", action="append", help="replay only these keys")
    ap.add_argument("--against", help="small mode: ENGINE==VERSION or ENGINE==installed")
    ap.add_argument("--json", type=Path, help="write every answer here")
    args = ap.parse_args(argv)
    bugs = [b for b in BUGS if not args.bug or b.key in args.bug]
    plan: list[tuple[Bug, str]] = []
    if args.against:
        engine, _, release = args.against.partition("==")
        plan = [(b, release) for b in bugs if b.engine == engine]
        if not plan:
            print(f"no replayed bug for engine {engine!r}")
            return 1
    else:
        plan = [(b, r) for b in bugs for r in (b.buggy, b.fixed)]
    records, wrong, skipped = [], 0, 0
    groups: dict[tuple[str, str], list[Bug]] = {}
    for bug, release in plan:
        groups.setdefault((bug.engine, release), []).append(bug)
    for (_engine, release), group in groups.items():
        for bug, out in zip(group, run_children(group, release), strict=True):
            got = verdict(bug, out)
            want = expected(bug, release, str(out.get("version")) if out.get("version") else None)
            if want == "UNMODELED" and got != "UNMODELED":  # an installed engine past the contract's rule
                out["unmodeled"] = f"contract {bug.contract} states {bug.engine} <= {bug.models_upto}: not checked"
                got = "UNMODELED"
            _show(bug, release, out, got, want)
            wrong += got not in (want, "SKIP")
            skipped += got == "SKIP"
            records.append(
                {
                    "bug": bug.key,
                    "reports": bug.reports,
                    "release": release,
                    "verdict": got,
                    "expected": want,
                    "answer": out,
                }
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(records, indent=1) + "\n")
        tmp.replace(args.json)
    print(f"{len(plan)} replays: {len(plan) - wrong - skipped} as expected, {wrong} not, {skipped} skipped")
    return 1 if wrong else (2 if skipped else 0)


if __name__ == "__main__":
    raise SystemExit(main())
