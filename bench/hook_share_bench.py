"""The vLLM plugin's hook on one real-width MoE layer, in process (issue 44 item 4).

    python bench/hook_share_bench.py                         # gemma-4-26B-A4B width, tp 2, 3 rounds
    python bench/hook_share_bench.py --old-check /tmp/check_old.py --out /tmp/h.json

vLLM 0.32's own `CPUUnquantizedExperts.process_weights_after_loading` (its pad and
`_C::prepack_moe_weight`) runs on a layer built as `create_weights` gives it (tests/tools/test_vllm_plugin.py
`_layer`: 128 experts, hidden 2816, moe_intermediate 704, bf16, the rank's shard at --tp), in each
mode: `off` (vLLM's method alone), `check` (the plugin's wrapper: snapshot, vLLM's method, the
contract's comparison), `replace` (the plugin pads and prepacks instead of vLLM), and, with
--old-check FILE (a check.py of another commit), `check-old` (that file's `snapshot` and `check_layer`).
Check rows also give `vllm_own_s`: the part of the hook spent in vLLM's own method. Each
(mode, round) runs in a child of its own, rounds interleaved and their order rotated; each child
reports the method's seconds and its peak extra memory (VmHWM growth over the RSS with the
layer's loaded weights, after a reset through /proc/self/clear_refs). Results, with the commit and
the load average, go to bench/results/hook_share.json (or --out).

The engine's load is not measured here: bench/vllm_wide_bench.py measures it (and the hook's
share of it) in vLLM's CPU engine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, ROOT, load

CHILD = r"""
import importlib.util, json, sys, time, torch
sys.path.insert(0, ".")
mode, tp, experts, hidden, inter, old = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
from vllm.model_executor.layers.fused_moe.experts import cpu_moe
from layoutc.tools.vllm_plugin import check, hook
from tests.tools.test_vllm_plugin import _layer
cpu_moe.is_zentorch_moe_supported = lambda layer: False
torch.set_num_threads(2)
if mode != "off":
    hook.install("check" if mode.startswith("check") else "replace")
if mode == "check-old":
    spec = importlib.util.spec_from_file_location("check_old", old)
    mod = importlib.util.module_from_spec(spec); sys.modules["check_old"] = mod; spec.loader.exec_module(mod)
    check.check_layer = mod.check_layer
    # that commit's snapshot too (a copy of the loaded weights as loaded; it takes no map)
    check.snapshot = lambda *a, gen=None, plan=None: mod.snapshot(*a)
def kib(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key + ":"))
torch.manual_seed(0)
ex, layer = _layer(cpu_moe, experts=experts, hidden=hidden, intermediate=inter, tp=tp)
import ctypes; ctypes.CDLL("libc.so.6").malloc_trim(0)
base = kib("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
t0 = time.perf_counter()
ex.process_weights_after_loading(layer)
seconds = time.perf_counter() - t0
peak = kib("VmHWM") - base
print(json.dumps({"mode": mode, "seconds": seconds, "peak_extra_mib": peak / 1024,
                  "weights_mib": sum(p.numel() * p.element_size() for p in (layer.w13_weight, layer.w2_weight)) / 2**20,
                  "hook_s": hook._STATE["seconds"] if mode != "off" else None,
                  "vllm_own_s": hook._STATE.get("engine_seconds") if mode.startswith("check") else None}))
"""


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                          check=False).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=2816)
    parser.add_argument("--intermediate", type=int, default=704)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old-check", default="", help="a check.py of another commit: adds the check-old mode")
    parser.add_argument("--out", default=str(RESULTS / "hook_share.json"))
    args = parser.parse_args()
    modes = ["off", "check", "replace"] + (["check-old"] if args.old_check else [])
    result: dict[str, Any] = {"commit": _commit(), "load_before": load(), "tp": args.tp, "experts": args.experts,
                              "hidden": args.hidden, "intermediate": args.intermediate, "runs": []}
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[: r % len(modes)]
        for mode in order:
            proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.tp), str(args.experts),
                                   str(args.hidden), str(args.intermediate), args.old_check],
                                  capture_output=True, text=True, cwd=ROOT, check=False)
            if proc.returncode:
                result["runs"].append({"mode": mode, "round": r, "error": proc.stderr[-800:]})
                print(mode, "failed:", proc.stderr[-800:], flush=True)
                continue
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            got["round"] = r
            result["runs"].append(got)
            print(json.dumps(got), flush=True)
    result["load_after"] = load()
    summary = {}
    for mode in modes:
        rows = [x for x in result["runs"] if x.get("mode") == mode and "error" not in x]
        if rows:
            summary[mode] = {"best_s": round(min(x["seconds"] for x in rows), 3),
                             "median_s": round(sorted(x["seconds"] for x in rows)[len(rows) // 2], 3),
                             "peak_extra_mib": round(max(x["peak_extra_mib"] for x in rows), 1)}
    result["summary"] = summary
    print(json.dumps(summary, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
