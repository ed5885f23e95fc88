"""The vLLM plugin at real width: engine load time, peak RSS per worker, plugin off / check / replace (issue 44).

    python bench/wide_checkpoint.py gemma4 /work/bigckpt/g4-2 --layers 2
    python bench/vllm_wide_bench.py /work/bigckpt/g4-2 --tp 2,4   # -> bench/results/vllm_wide.json

One child (tests/support/engine/child.py, vLLM 0.32's CPU engine, engine core in the child, workers
spawned by the "mp" executor, VLLM_CPU_OMP_THREADS_BIND=nobind as tests/support/engine starts it on this
2-core machine) loads the checkpoint once per (tp, mode), modes off, check, replace in that order at
each tp, each a fresh `vllm.LLM`; `--keep-going`, so a load that fails is recorded and the next goes on.
Per load:

* load seconds: the `LLM(...)` constructor (worker spawn, weight load, the plugin, KV cache, warm-up);
* peak RSS per process: this script samples VmRSS and RssAnon of the child and every descendant every
  100 ms and attributes each sample to the load whose marker line (`=== layoutc engine run ... ===`)
  the child printed last (a worker: to the load it was first seen in); a worker is a descendant whose
  peak RSS is over 256 MiB (the spawn's resource tracker is not); the child itself is the engine core
  (it also holds the driver's state);
* the hook's milliseconds per worker, from the summary line each worker logs
  (`layoutc: mode=..., ... N ms in layoutc`), and its share of the load seconds;
* the greedy tokens of `--prompts` fixed prompts x `--tokens` new tokens; the script exits 1 unless
  every mode that loaded at a tp produced the same tokens as off at that tp.

`--max-anon-gib G` stops the child and every worker (SIGKILL) once their anonymous memory together (each
process's proportional share, `Pss_Anon`: a shell a worker forks shares its pages and is not counted twice)
passes G GiB, and records where (the machine is shared: a load that would pass the session's memory allowance is
shown, not run to the end).

Results, with the commit and the load average before and after, go to bench/results/vllm_wide.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, ROOT, load

CHILD = ROOT / "tests" / "support" / "engine" / "child.py"
SITE = ROOT / "tests" / "support" / "engine" / "site"
MODES = ("off", "check", "replace")
MARKER = re.compile(r"=== layoutc engine run tp=(\d+) mode=(\w+) ep=\d ===")
HOOK = re.compile(r"layoutc: mode=(\w+),.*?([\d.]+) ms in layoutc")
# check mode runs vLLM's own method inside the hook, and says how long it took
OWN = re.compile(r"([\d.]+) ms of it in vLLM's own method")


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "?"


def _tree(pid: int) -> list[int]:
    """`pid` and its live descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            continue
    return out


def _rss(pid: int) -> tuple[int, int, str] | None:
    """(VmRSS KiB, RssAnon KiB, name) of `pid`, None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except OSError:
        return None
    kib = lambda key: int(fields.get(key, "0 kB").split()[0])  # noqa: E731
    return kib("VmRSS"), kib("RssAnon"), fields.get("Name", "?").strip()


def _pss_anon(pid: int, fallback: int) -> int:
    """Proportional anonymous KiB of `pid` (smaps_rollup `Pss_Anon`): a process a worker forks (a shell it
    runs) shares the worker's pages copy-on-write, and its RssAnon counts them again; `fallback` when
    the kernel gives none."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss_Anon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return fallback


#: short-lived helpers a worker forks (they share its pages copy-on-write): never counted as workers
HELPERS = ("sh", "bash", "dash")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a checkpoint folder (bench/wide_checkpoint.py gemma4 ...)")
    ap.add_argument("--tp", default="2,4")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of off, check, replace")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--out", type=Path, default=RESULTS / "vllm_wide.json")
    ap.add_argument(
        "--max-anon-gib",
        type=float,
        default=0.0,
        help="stop the child and its workers once their anonymous memory together passes this (0: no cap)",
    )
    args = ap.parse_args()
    modes = [m for m in MODES if m in args.modes.split(",")]
    plan = [f"{tp}:{mode}" for tp in args.tp.split(",") for mode in modes]
    before = load()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTC_VLLM", "LAYOUTC_TEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), *filter(None, [env.get("PYTHONPATH")])])
    env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", VLLM_CPU_KVCACHE_SPACE="1", LAYOUTC_TEST_BLOCK_ZENTORCH="1")
    runs_json = args.out.with_suffix(".runs.json")
    cmd = [
        sys.executable,
        str(CHILD),
        args.model,
        str(runs_json),
        "--runs",
        ",".join(plan),
        "--keep-going",
        "--tokens",
        str(args.tokens),
        "--prompts",
        str(args.prompts),
    ]
    current = ["start"]
    peaks: dict[str, dict[int, dict[str, Any]]] = {}
    born: dict[int, str] = {}
    capped: dict[str, Any] = {}
    log: list[str] = []
    t0 = time.perf_counter()
    with subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as child:
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.1):
                tree, anon = _tree(child.pid), 0
                for pid in tree:
                    got = _rss(pid)
                    if got is None:
                        continue
                    anon += _pss_anon(pid, got[1]) if args.max_anon_gib else got[1]
                    # a worker belongs to the load it was first seen in (one that outlives its load's
                    # shutdown is not counted in the next); the child (engine core) to the current load
                    key = current[0] if pid == child.pid else born.setdefault(pid, current[0])
                    rec = peaks.setdefault(key, {}).setdefault(pid, {"name": got[2], "rss_kib": 0, "anon_kib": 0})
                    rec["name"] = got[2]
                    rec["rss_kib"] = max(rec["rss_kib"], got[0])
                    rec["anon_kib"] = max(rec["anon_kib"], got[1])
                if args.max_anon_gib and anon > args.max_anon_gib * 2**20 and not capped:
                    capped.update(load=current[0], anon_kib=anon, after_s=round(time.perf_counter() - t0, 1))
                    for pid in reversed(tree):  # the workers first, then the child
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        assert child.stdout is not None
        for line in child.stdout:
            log.append(line)
            m = MARKER.search(line)
            if m:
                current[0] = f"{m.group(1)}:{m.group(2)}"
                print(line.strip(), f"({time.perf_counter() - t0:.0f} s)", flush=True)
        rc = child.wait()
        stop.set()
        watcher.join()
    after = load()
    text = "".join(log)
    runs = json.loads(runs_json.read_text())["runs"] if runs_json.exists() else []
    # the hook's summary lines, per load (split the log at the markers)
    hook: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}
    key = "start"
    for line in log:
        m = MARKER.search(line)
        if m:
            key = f"{m.group(1)}:{m.group(2)}"
        for _mode, ms in HOOK.findall(line):
            hook.setdefault(key, []).append(float(ms))
            found = OWN.search(line)
            own.setdefault(key, []).append(float(found.group(1)) if found else 0.0)
    table = []
    for r in runs:
        key = f"{r['tp']}:{r['mode']}"
        procs = peaks.get(key, {})
        workers = sorted(
            (
                p
                for pid, p in procs.items()
                if pid != child.pid and p["rss_kib"] > 256 * 1024 and p["name"] not in HELPERS
            ),
            key=lambda p: -p["rss_kib"],
        )
        core = procs.get(child.pid, {})
        row = {
            "tp": r["tp"],
            "mode": r["mode"],
            "error": r.get("error"),
            "load_s": r.get("load_s"),
            "load_cpu_s": r.get("load_cpu_s"),
            "tokens": r.get("tokens"),
            "worker_peak_rss_mib": [round(p["rss_kib"] / 1024) for p in workers],
            "worker_peak_anon_mib": [round(p["anon_kib"] / 1024) for p in workers],
            "engine_core_peak_rss_mib": round(core.get("rss_kib", 0) / 1024),
            "hook_ms": hook.get(key, []),
            "vllm_own_ms": own.get(key, []),
        }
        if row["load_s"] and row["hook_ms"]:
            row["hook_share_of_load"] = round(max(row["hook_ms"]) / 1e3 / row["load_s"], 4)
            # layoutc's own part: the hook less vLLM's method that check mode runs inside it
            row["layoutc_ms"] = [round(h - o, 1) for h, o in zip(row["hook_ms"], row["vllm_own_ms"], strict=True)]
            row["layoutc_share_of_load"] = round(max(row["layoutc_ms"]) / 1e3 / row["load_s"], 4)
        table.append(row)
    same = {}
    for tp in {r["tp"] for r in table}:
        loaded = [r for r in table if r["tp"] == tp and r["tokens"]]
        off = next((r for r in loaded if r["mode"] == "off"), None)
        same[str(tp)] = bool(off) and all(r["tokens"] == off["tokens"] for r in loaded)
    result = {
        "bench": "vllm_wide",
        "commit": _commit(),
        "model": args.model,
        "load_before": before,
        "load_after": after,
        "child_rc": rc,
        "capped": capped or None,
        "peaks_by_load": {
            key: [
                {"name": p["name"], "rss_mib": round(p["rss_kib"] / 1024), "anon_mib": round(p["anon_kib"] / 1024)}
                for p in procs.values()
            ]
            for key, procs in peaks.items()
        },
        "wall_s": round(time.perf_counter() - t0, 1),
        "rows": table,
        "same_tokens_per_tp": same,
        "log_tail": text[-8000:],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(args.out)
    runs_json.unlink(missing_ok=True)
    print(f"load before: {before['uptime']}\nload after:  {after['uptime']}")
    print(
        "| tp | mode | load (s) | load CPU (s) | peak RSS per worker (MiB) | anon per worker (MiB) | engine core (MiB) "
        "| hook (ms, per worker) | of it vLLM's own (ms) | hook / load | layoutc's own / load |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in table:
        if r["error"]:
            print(f"| {r['tp']} | {r['mode']} | failed: {r['error'][:200]} | | | | | | | | |")
            continue
        print(
            f"| {r['tp']} | {r['mode']} | {r['load_s']:.1f} | {r['load_cpu_s']:.1f} | {r['worker_peak_rss_mib']} | "
            f"{r['worker_peak_anon_mib']} | {r['engine_core_peak_rss_mib']} | "
            f"{', '.join(f'{x:.0f}' for x in r['hook_ms']) or '-'} | "
            f"{', '.join(f'{x:.0f}' for x in r['vllm_own_ms']) or '-'} | "
            f"{100 * r.get('hook_share_of_load', 0):.2f}% | {100 * r.get('layoutc_share_of_load', 0):.2f}% |"
        )
    if capped:
        print(
            f"stopped: the child and its workers held {capped['anon_kib'] / 2**20:.1f} GiB anonymous memory during "
            f"load {capped['load']} after {capped['after_s']} s, over --max-anon-gib {args.max_anon_gib}"
        )
        for key, procs in peaks.items():
            big = [p for p in procs.values() if p["rss_kib"] > 64 * 1024]
            print(key, [(p["name"], round(p["rss_kib"] / 1024), round(p["anon_kib"] / 1024)) for p in big])
    print(f"same greedy tokens per tp: {same}")
    return 0 if same and all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
