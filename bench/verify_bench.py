"""Wall time of `layoutc verify contracts/`, per property, with solver query counts.

    python bench/verify_bench.py             # writes bench/results/verify.json
    python bench/verify_bench.py --runs 9

Each run is a fresh `layoutc verify contracts/` subprocess (the console script from
this interpreter's environment), so interpreter start-up and every import (z3
included) are in the time, as a user sees it. Goal: < 2 s on 2 cores (best and
median of `--runs`, default 5). The same is done with `--format json`, whose
per-property `seconds` and `queries` are aggregated over the runs (best / median
seconds per property; query counts must not vary between runs). Start-up floors
(`python -c pass`, `import z3`, `import layoutc.cli`) are timed alongside, to show
where the wall time goes. Before each run the script waits (up to 2 s) for the
machine to be quiet; the machine's busy fraction is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

GOAL_S = 2.0


def layoutc_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "layoutc"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("layoutc")
    return [found] if found else [sys.executable, "-m", "layoutc.cli"]


def timed(cmd: list[str], runs: int) -> tuple[list[float], list[float], list[subprocess.CompletedProcess[str]]]:
    times, busy, procs = [], [], []
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="0")
    for _ in range(runs):
        busy.append(C.wait_for_quiet(0.3, 0.1, 2.0))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=C.ROOT, capture_output=True, text=True, check=False, env=env)
        times.append(time.perf_counter() - t0)
        procs.append(proc)
    return times, busy, procs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--path", default="contracts/")
    args = ap.parse_args()
    before = C.load()
    base = layoutc_cmd()

    # warm the page cache and the .pyc files once, untimed
    subprocess.run([*base, "verify", args.path], cwd=C.ROOT, capture_output=True, check=False)

    text_t, text_busy, text_procs = timed([*base, "verify", args.path], args.runs)
    json_t, json_busy, json_procs = timed([*base, "verify", args.path, "--format", "json"], args.runs)
    floors = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import z3'": [sys.executable, "-c", "import z3"],
        "python -c 'import layoutc.cli'": [sys.executable, "-c", "import layoutc.cli"],
        "python -c 'import layoutc.verify'": [sys.executable, "-c", "import layoutc.verify"],
    }
    floor_t = {k: timed(v, args.runs)[0] for k, v in floors.items()}
    after = C.load()

    exit_codes = sorted({p.returncode for p in text_procs + json_procs})
    reports = [json.loads(p.stdout) for p in json_procs if p.stdout.strip()]
    props: dict[tuple[str, str], dict[str, Any]] = {}
    for rep in reports:
        for c in rep["contracts"]:
            for p in c["properties"]:
                key = (c["contract"], p["id"])
                entry = props.setdefault(key, {"contract": c["contract"], "property": p["id"], "status": p["status"],
                                               "seconds": [], "queries": set(), "detail": p["detail"]})
                entry["seconds"].append(p["seconds"])
                entry["queries"].add(p["queries"])
    prop_rows = []
    for e in props.values():
        prop_rows.append({"contract": e["contract"], "property": e["property"], "status": e["status"],
                          "best_s": min(e["seconds"]), "median_s": statistics.median(e["seconds"]),
                          "queries": sorted(e["queries"])[0] if len(e["queries"]) == 1 else sorted(e["queries"]),
                          "queries_stable": len(e["queries"]) == 1, "detail": e["detail"]})
    per_contract: dict[str, dict[str, Any]] = {}
    for r in prop_rows:
        pc = per_contract.setdefault(r["contract"], {"median_s": 0.0, "queries": 0})
        pc["median_s"] += r["median_s"]
        pc["queries"] += r["queries"] if isinstance(r["queries"], int) else max(r["queries"])
    solver_total = sum(r["median_s"] for r in prop_rows)
    total_queries = sum(pc["queries"] for pc in per_contract.values())

    wall = {"text": C.stats(text_t), "json": C.stats(json_t)}
    for v in wall.values():
        v["best_s"], v["median_s"] = v["best_ms"] / 1e3, v["median_ms"] / 1e3
    met_best = wall["text"]["best_s"] < GOAL_S and wall["json"]["best_s"] < GOAL_S
    met = wall["text"]["median_s"] < GOAL_S and wall["json"]["median_s"] < GOAL_S

    rows = [[f"layoutc verify {args.path}", f"{wall['text']['best_s']:.3f}", f"{wall['text']['median_s']:.3f}",
             f"{wall['text']['max_ms'] / 1e3:.3f}"],
            [f"layoutc verify {args.path} --format json", f"{wall['json']['best_s']:.3f}",
             f"{wall['json']['median_s']:.3f}", f"{wall['json']['max_ms'] / 1e3:.3f}"]]
    for k, secs in floor_t.items():
        st = C.stats(secs)
        rows.append([k, f"{st['best_ms'] / 1e3:.3f}", f"{st['median_ms'] / 1e3:.3f}", f"{st['max_ms'] / 1e3:.3f}"])
    print(f"load before: {before['uptime']}")
    print(C.table(rows, ["command (fresh process)", "best s", "median s", "max s"]))
    print(f"\ngoal < {GOAL_S} s: best {C.verdict(met_best)}, median {C.verdict(met)}; exit codes {exit_codes}")
    print()
    print(C.table([[r["contract"], r["property"], r["status"], f"{r['best_s'] * 1e3:.1f}",
                    f"{r['median_s'] * 1e3:.1f}", r["queries"]] for r in prop_rows],
                  ["contract", "property", "status", "best ms", "median ms", "queries"]))
    print(f"\nsum of per-property solver time (medians): {solver_total:.3f} s; solver queries: {total_queries}")
    print(f"load after: {after['uptime']}")
    payload = {"benchmark": "verify", "command": [*(Path(x).name if i == 0 else x for i, x in enumerate(base)),
                                                   "verify", args.path],
               "runs": args.runs, "goal_s": GOAL_S, "met_median": met, "met_best": met_best, "exit_codes": exit_codes,
               "machine": C.machine(with_torch=False), "git": C.git_state(), "load_before": before, "load_after": after,
               "machine_busy_before_runs": {"text": text_busy, "json": json_busy},
               "wall": wall, "wall_seconds": {"text": text_t, "json": json_t},
               "startup_floors": {k: C.stats(v) for k, v in floor_t.items()},
               "summary": reports[-1]["summary"] if reports else None,
               "solver_seconds_sum_median": solver_total, "solver_queries_total": total_queries,
               "per_contract": per_contract, "properties": prop_rows}
    print(f"wrote {C.write_json('verify.json', payload)}")
    return 0 if exit_codes == [0] else 1


if __name__ == "__main__":
    sys.exit(main())
