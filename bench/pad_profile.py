"""The generated pad taken apart, next to a plain copy and the alternatives measured for it.

    python bench/pad_profile.py            # writes bench/results/pad_profile.json
    python bench/pad_profile.py --thp      # the fresh-output rows again with THP_MEM_ALLOC_ENABLE=1

Same tensors as bench/pad_bench.py (gemma-4-26B-A4B tp 4 on vllm_cpu_grouped_gemm,
Qwen3-235B-A22B tp 8 on aiter_fused_moe), bf16, 2 threads. For each tensor it times:

* `pad_out`: the generated `pad_*(t, plan, out=out)` (for w2 since 6e32068 the one-pass
  bit-mask path, `layout._masked_rows`; before it, copy then fill as in `op:*` below);
* `copy`: `out.copy_(same_shape_source)` (the bound);
* each torch op the generated `_scatter` issues, alone (`op:copy[...]`, `op:fill[...]`);
* `merged`: what `_scatter` could issue instead: the gate/up segments as one extra
  dimension, so one strided copy and one strided fill per tensor (w13: 2 ops, not 4);
* `blocked[k]`: copy then fill per block of k experts, so the fill writes cache lines
  the copy just brought in (w2's 16-column tail touches every 6th line);
* `fresh_pad`, `fresh_alloc_copy`, `fresh_touch`: fresh outputs, and the cost of only
  faulting in the pages and writing them once (`torch.empty(...).zero_()`).
* with `--native-prototype` (w2 only): a 20-line C++ row kernel built with
  `torch.utils.cpp_extension.load_inline` into /tmp (needs g++; about a minute to
  build): per row, a vectorised loop copies the I logical values and writes the
  P - I zeros, rows split over the 2 threads with `at::parallel_for`: one pass
  instead of copy + fill. A prototype of the fix, not how layoutc should ship it.

This is a diagnostic for docs/benchmarks.md, not a goal check.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C
import torch

BF16 = torch.bfloat16
CASES = {
    "gemma-4-26B-A4B": ("vllm_cpu_grouped_gemm", dict(num_experts=128, hidden_size=2816, intermediate_size=704,
                                                      tp_size=4, isa="vec", activation="gelu_tanh", dtype="bfloat16")),
    "Qwen3-235B-A22B": ("aiter_fused_moe", dict(num_experts=64, hidden_size=4096, intermediate_size=1536, tp_size=8,
                                                activation="silu")),
}


def timeit(fns: dict[str, Any], repeats: int) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {n: [] for n in fns}
    names = list(fns)
    for n in names:
        r = fns[n]()
        del r
    for i in range(repeats):
        for n in names[i % len(names):] + names[:i % len(names)]:
            C.wait_for_quiet(0.3, 0.05, 1.0)
            t0 = time.perf_counter()
            r = fns[n]()
            times[n].append(time.perf_counter() - t0)
            del r
    return {n: C.stats(t) for n, t in times.items()}


_NATIVE_SRC = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cstdint>
// out[r, :I] = src[r, :], out[r, I:] = 0 for 2-byte elements, in one pass over the rows.
void pad_rows(torch::Tensor src, torch::Tensor out) {
  TORCH_CHECK(src.is_contiguous() && out.is_contiguous() && src.dim() == 2 && out.dim() == 2);
  TORCH_CHECK(src.element_size() == 2 && out.element_size() == 2);
  const int64_t rows = out.size(0), p = out.size(1), i = src.size(1);
  const uint16_t* __restrict s = static_cast<const uint16_t*>(src.data_ptr());
  uint16_t* __restrict o = static_cast<uint16_t*>(out.data_ptr());
  at::parallel_for(0, rows, 2048, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const uint16_t* __restrict sr = s + r * i;
      uint16_t* __restrict orow = o + r * p;
#pragma GCC ivdep
      for (int64_t j = 0; j < i; ++j) orow[j] = sr[j];
#pragma GCC ivdep
      for (int64_t j = i; j < p; ++j) orow[j] = 0;
    }
  });
}
"""


def native_module() -> Any:
    from torch.utils.cpp_extension import load_inline

    build = Path("/tmp/layoutc_bench_native2")
    build.mkdir(exist_ok=True)
    return load_inline("layoutc_bench_pad_rows", cpp_sources=[_NATIVE_SRC], functions=["pad_rows"],
                       extra_cflags=["-O3", "-march=native", "-fopenmp"], build_directory=str(build), verbose=False)


NATIVE: Any = None


def profile_tensor(case: str, tensor: str, repeats: int, fresh_only: bool) -> dict[str, Any]:
    module, kwargs = CASES[case]
    mod = importlib.import_module(f"layoutc_generated.{module}")
    plan = mod.plan(**kwargs)
    weight = mod.LAYOUT.weight(tensor)  # by role: the weight of projection `tensor`
    logical, padded = weight.shapes(plan)
    pad = weight.pad
    i, p = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
    e = plan.num_experts
    src = torch.empty(logical, dtype=BF16).normal_()
    same = torch.empty(padded, dtype=BF16).normal_()
    out = torch.empty(padded, dtype=BF16).fill_(1.0)

    fns: dict[str, Any] = {}
    if not fresh_only:
        fns["pad_out"] = lambda: pad(src, plan, out=out)
        fns["copy"] = lambda: out.copy_(same)
        if tensor == "w13":
            h = logical[2]
            fns["op:copy[gate]"] = lambda: out[:, :i].copy_(src[:, :i])
            fns["op:copy[up]"] = lambda: out[:, p:p + i].copy_(src[:, i:])
            fns["op:fill[gate pad]"] = lambda: out[:, i:p].fill_(0)
            fns["op:fill[up pad]"] = lambda: out[:, p + i:].fill_(0)
            o4, s4 = out.view(e, 2, p, h), src.view(e, 2, i, h)

            def merged() -> torch.Tensor:
                o4[:, :, :i].copy_(s4)
                o4[:, :, i:].fill_(0)
                return out
            fns["merged (2 ops)"] = merged
        else:
            fns["op:copy[k]"] = lambda: out[..., :i].copy_(src)
            fns["op:fill[k pad]"] = lambda: out[..., i:].fill_(0)
            if NATIVE is not None:
                s2, o2 = src.view(-1, i), out.view(-1, p)
                fns["native row kernel (prototype)"] = lambda: NATIVE.pad_rows(s2, o2)
            for k in (1, 4, 16):
                def blocked(k: int = k) -> torch.Tensor:
                    for lo in range(0, e, k):
                        out[lo:lo + k, :, :i].copy_(src[lo:lo + k])
                        out[lo:lo + k, :, i:].fill_(0)
                    return out
                fns[f"blocked[{k} experts]"] = blocked
    fns["fresh_pad"] = lambda: pad(src, plan)
    fns["fresh_alloc_copy"] = lambda: torch.empty(padded, dtype=BF16).copy_(same)
    fns["fresh_touch (empty+zero_)"] = lambda: torch.empty(padded, dtype=BF16).zero_()
    res = timeit(fns, repeats)
    if NATIVE is not None and tensor == "w2" and not fresh_only:
        NATIVE.pad_rows(src.view(-1, i), out.view(-1, p))
        assert torch.equal(out, pad(src, plan)), "native prototype disagrees with pad_w2"
    return {"case": case, "tensor": tensor, "padded_shape": list(padded),
            "padded_mib": out.numel() * 2 / C.MiB, "rows": res}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--thp", action="store_true", help="rerun the fresh rows with THP_MEM_ALLOC_ENABLE=1")
    ap.add_argument("--native-prototype", action="store_true",
                    help="also time a one-pass C++ row kernel for w2 (built with load_inline)")
    ap.add_argument("--fresh-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(2)
    global NATIVE
    if args.native_prototype:
        NATIVE = native_module()
    before = C.load()
    out = [profile_tensor(c, t, args.repeats, args.fresh_only) for c in CASES for t in ("w13", "w2")]
    after = C.load()
    rows = []
    for r in out:
        copy = r["rows"].get("copy", {}).get("best_ms")
        for n, st in r["rows"].items():
            rel = f"{copy / st['best_ms']:.2f}x" if copy and not n.startswith("fresh") else ""
            rows.append([r["case"], r["tensor"], n, f"{st['best_ms']:.2f}", f"{st['median_ms']:.2f}", rel])
    print(f"load before: {before['uptime']}")
    print(C.table(rows, ["case", "tensor", "variant", "best ms", "median ms", "copy/variant (best)"]))
    print(f"load after: {after['uptime']}")
    payload: dict[str, Any] = {"benchmark": "pad_profile", "thp_env": os.environ.get("THP_MEM_ALLOC_ENABLE"),
                               "machine": C.machine(), "git": C.git_state(),
                               "load_before": before, "load_after": after, "results": out}
    if args.thp:
        env = dict(os.environ, THP_MEM_ALLOC_ENABLE="1")
        proc = subprocess.run([sys.executable, __file__, "--fresh-only", "--no-write", "--repeats",
                               str(args.repeats)], env=env, capture_output=True, text=True, check=True)
        print("\nwith THP_MEM_ALLOC_ENABLE=1 (fresh outputs only):")
        print(proc.stdout)
        payload["thp_fresh_stdout"] = proc.stdout
    if not args.no_write:
        print(f"wrote {C.write_json('pad_profile.json', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
