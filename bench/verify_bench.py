"""Wall time of `layoutc verify contracts/` cold and cached, and of `layoutc compile`.

    python bench/verify_bench.py             # writes bench/results/verify.json
    python bench/verify_bench.py --runs 9

Each measurement is a fresh subprocess (the console script from this interpreter's
environment), so interpreter start-up and every import (z3 included) are in the time,
as a user sees it. Scenarios, interleaved round by round so that their ratios come
from the same machine state (the machine is shared: absolute times move with load):

- cold: an empty verdict cache (`LAYOUTC_CACHE_DIR` a fresh directory), so every
  contract is parsed and proved; contracts are verified in parallel processes, one per
  core. Goal < 1.5 s on 2 cores.
- cold, serial: the same with `LAYOUTC_JOBS=1` (the parallel speed-up).
- warm: the same command again, nothing changed (every verdict from the cache, no
  parsing, no z3 import). Goal < 0.3 s.
- compile: `layoutc compile contracts/ --out TMP` after a verify (verdicts reused).
- cold json: `--format json` with an empty cache, whose per-property `seconds` and
  `queries` are aggregated over the runs (query counts must not vary between runs).
- cold, no gc.freeze: cold with the driver's `gc.freeze()` before forking turned off
  (the runner replaces it with a no-op; issue 26's A/B of that change).
- cold, half: cold on the first half of the contracts (sorted by name, copied into a
  scratch folder): growth per contract = (CPU all - CPU half) / (contracts added).

Every command is `python -c RUNNER` (the console script's body, `layoutc.cli.entry`),
so the A/B differs only in the patch. CPU seconds (user + sys of the process tree,
from getrusage(RUSAGE_CHILDREN)) are the figure to compare: on a shared machine wall
time is mostly the other processes. Goals (issue 26): cold <= 2.5 CPU-s, warm <= 0.25
CPU-s, growth <= 0.1 CPU-s per contract.

Start-up floors (`python -c pass`, `import layoutc.cli`, `import z3`) are timed alongside.
Before each run the script waits (up to 2 s) for the machine to be quiet; the busy
fraction and the load are recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

GOAL_COLD_S = 1.5
GOAL_WARM_S = 0.3
GOAL_CPU = {"cold": 2.5, "warm": 0.25}
GOAL_GROWTH_CPU = 0.1
RUNNER = ("import os, sys, gc\n"
          "if os.environ.get('LAYOUTC_BENCH_NO_FREEZE'):\n"
          "    gc.freeze = gc.unfreeze = lambda: None\n"
          "from layoutc.cli import entry\n"
          "sys.argv[0] = 'layoutc'\n"
          "sys.exit(entry())\n")


def layoutc_cmd() -> list[str]:
    return [sys.executable, "-c", RUNNER]


CPU: dict[str, list[float]] = {}  # user + sys seconds of each run's process tree, by scenario


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(cmd: list[str], env: dict[str, str], name: str = "") -> tuple[float, float, subprocess.CompletedProcess[str]]:
    busy = C.wait_for_quiet(0.3, 0.1, 2.0)
    c0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=C.ROOT, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - t0
    CPU.setdefault(name, []).append(_children_cpu() - c0)
    return wall, busy, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--path", default="contracts/")
    args = ap.parse_args()
    before = C.load()
    base = layoutc_cmd()
    scratch = Path(tempfile.mkdtemp(prefix="layoutc-verify-bench-"))
    cache = scratch / "cache"
    # bytecode as a user has it: Python writes .pyc unless PYTHONDONTWRITEBYTECODE is set to
    # anything at all ("0" too), so it is removed; the untimed warm-up below writes them
    env = dict(os.environ, LAYOUTC_CACHE_DIR=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("LAYOUTC_JOBS", None)
    serial_env = dict(env, LAYOUTC_JOBS="1")
    nofreeze_env = dict(env, LAYOUTC_BENCH_NO_FREEZE="1")
    verify = [*base, "verify", args.path]
    all_files = sorted(Path(C.ROOT, args.path).glob("*.moe"))
    half = scratch / "half"
    half.mkdir()
    for f in all_files[:len(all_files) // 2]:
        shutil.copy2(f, half / f.name)
    n_half, n_all = len(all_files) // 2, len(all_files)
    compile_ = [*base, "compile", args.path, "--out", str(scratch / "out")]

    def fresh_cache() -> None:
        shutil.rmtree(cache, ignore_errors=True)

    # warm the page cache, the .pyc files and the parser tables once, untimed
    subprocess.run(verify, cwd=C.ROOT, capture_output=True, check=False, env=env)
    names = ["cold", "cold, no gc.freeze", "cold, half", "cold, serial", "warm", "compile (verdicts reused)",
             "cold json"]
    envs = {"cold, serial": serial_env, "cold, no gc.freeze": nofreeze_env}
    times: dict[str, list[float]] = {n: [] for n in names}
    busy: dict[str, list[float]] = {n: [] for n in names}
    procs: list[subprocess.CompletedProcess[str]] = []
    json_procs: list[subprocess.CompletedProcess[str]] = []
    for r in range(args.runs):
        order = names if r % 2 == 0 else [names[1], names[0], *names[2:]]  # the A/B pair alternates
        for name in order:
            if name.startswith("cold"):
                fresh_cache()
            cmd = [*verify, "--format", "json"] if name == "cold json" else compile_ if name.startswith("compile") \
                else [*base, "verify", str(half)] if name == "cold, half" else verify
            t, b, proc = run_once(cmd, envs.get(name, env), name)
            times[name].append(t)
            busy[name].append(b)
            (json_procs if name == "cold json" else procs).append(proc)
            if name == "cold json":  # leave a full cache for the next round's warm run
                subprocess.run(verify, cwd=C.ROOT, capture_output=True, check=False, env=env)
    floors = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import layoutc.cli'": [sys.executable, "-c", "import layoutc.cli"],
        "python -c 'import z3'": [sys.executable, "-c", "import z3"],
    }
    floor_t = {k: [run_once(v, env)[0] for _ in range(args.runs)] for k, v in floors.items()}
    after = C.load()
    shutil.rmtree(scratch, ignore_errors=True)

    exit_codes = sorted({p.returncode for p in procs + json_procs})
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

    wall = {n: C.stats(v) for n, v in times.items()}
    for v in wall.values():
        v["best_s"], v["median_s"] = v["best_ms"] / 1e3, v["median_ms"] / 1e3
    goals = {"cold": GOAL_COLD_S, "warm": GOAL_WARM_S}
    met = {n: {"best": wall[n]["best_s"] < g, "median": wall[n]["median_s"] < g} for n, g in goals.items()}
    ratios = {"cold / warm (median)": wall["cold"]["median_s"] / wall["warm"]["median_s"],
              "cold serial / cold parallel (median)": wall["cold, serial"]["median_s"] / wall["cold"]["median_s"],
              "cold / compile after verify (median)": wall["cold"]["median_s"]
              / wall["compile (verdicts reused)"]["median_s"]}

    cpu = {n: {"best_s": min(CPU[n]), "median_s": statistics.median(CPU[n]), "max_s": max(CPU[n])} for n in names}
    growth = (cpu["cold"]["median_s"] - cpu["cold, half"]["median_s"]) / max(1, n_all - n_half)
    cpu_goals = {"cold median <= 2.5 CPU-s": cpu["cold"]["median_s"] <= GOAL_CPU["cold"],
                 "warm median <= 0.25 CPU-s": cpu["warm"]["median_s"] <= GOAL_CPU["warm"],
                 "growth <= 0.1 CPU-s per contract": growth <= GOAL_GROWTH_CPU}
    freeze_gain = cpu["cold, no gc.freeze"]["median_s"] - cpu["cold"]["median_s"]
    rows = [[f"{n}", f"{wall[n]['best_s']:.3f}", f"{wall[n]['median_s']:.3f}", f"{wall[n]['max_ms'] / 1e3:.3f}",
             f"{cpu[n]['median_s']:.3f}", f"{statistics.median(busy[n]):.2f}"] for n in names]
    for k, secs in floor_t.items():
        st = C.stats(secs)
        rows.append([k, f"{st['best_ms'] / 1e3:.3f}", f"{st['median_ms'] / 1e3:.3f}", f"{st['max_ms'] / 1e3:.3f}",
                     "", ""])
    print(f"load before: {before['uptime']}")
    print(C.table(rows, ["scenario (fresh process)", "best s", "median s", "max s", "cpu median s", "busy before"]))
    for n, g in goals.items():
        print(f"goal {n} < {g} s: best {C.verdict(met[n]['best'])}, median {C.verdict(met[n]['median'])}")
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    print(f"CPU-s median: cold {cpu['cold']['median_s']:.3f} ({n_all} contracts), no gc.freeze "
          f"{cpu['cold, no gc.freeze']['median_s']:.3f} (gc.freeze saves {freeze_gain:.3f}), half "
          f"{cpu['cold, half']['median_s']:.3f} ({n_half}), warm {cpu['warm']['median_s']:.3f}; "
          f"growth {growth:.3f} CPU-s per contract")
    for k, ok in cpu_goals.items():
        print(f"goal {k}: {C.verdict(ok)}")
    print(f"exit codes {exit_codes}")
    print()
    print(C.table([[r["contract"], r["property"], r["status"], f"{r['best_s'] * 1e3:.1f}",
                    f"{r['median_s'] * 1e3:.1f}", r["queries"]] for r in prop_rows],
                  ["contract", "property", "status", "best ms", "median ms", "queries"]))
    print(f"\nsum of per-property solver time (medians, cold json runs): {solver_total:.3f} s; "
          f"solver queries: {total_queries}")
    print(f"load after: {after['uptime']}")
    payload = {"benchmark": "verify", "command": [*(Path(x).name if i == 0 else x for i, x in enumerate(base)),
                                                   "verify", args.path],
               "runs": args.runs, "goals_s": goals, "met": met, "ratios": ratios, "exit_codes": exit_codes,
               "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
               "machine": C.machine(with_torch=False), "git": C.git_state(), "load_before": before,
               "load_after": after, "machine_busy_before_runs": busy, "wall": wall, "wall_seconds": times,
               "cpu": cpu, "cpu_seconds": {n: CPU[n] for n in names},
               "contracts": {"all": n_all, "half": n_half}, "growth_cpu_s_per_contract": growth,
               "gc_freeze_saves_cpu_s_median": freeze_gain, "cpu_goals_met": cpu_goals,
               "startup_floors": {k: C.stats(v) for k, v in floor_t.items()},
               "summary": reports[-1]["summary"] if reports else None,
               "solver_seconds_sum_median": solver_total, "solver_queries_total": total_queries,
               "per_contract": per_contract, "properties": prop_rows}
    print(f"wrote {C.write_json('verify.json', payload)}")
    return 0 if exit_codes == [0] else 1


if __name__ == "__main__":
    sys.exit(main())
