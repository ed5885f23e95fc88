"""The padded real vLLM CPU kernel against the per-expert torch loop, gemma-4 shapes.

    python bench/kernel_bench.py                 # 128 experts, writes bench/results/kernel.json
    python bench/kernel_bench.py --experts 32    # quicker

gemma-4-26B-A4B MoE layer at tp=4: hidden 2816, intermediate 704 -> I_pp 176, padded
to 192 by `vllm_cpu_grouped_gemm` (isa vec), gelu_tanh, bf16, 2 threads.

* kernel: `fused_moe(x, *prepack(w13, w2, plan), ...)` (the real `_C::cpu_fused_moe`
  on padded, prepacked weights) vs `layoutc.tools.tp.per_expert_loop` on the *unpadded*
  weights (the fallback an engine takes when the shard is not tile-aligned), at 64
  and 512 tokens, top-2 and top-8 (random distinct experts per token, softmax
  weights). Both outputs are checked against the float32 `reference_moe`.
* one-time cost beside it: `pad_w13` + `pad_w2` (fresh outputs), `prepack_padded`
  (the real `_C::prepack_moe_weight`), and `prepack` (both, end to end).
* glue overhead at 64 tokens: `fused_moe(...)` vs `torch.ops._C.cpu_fused_moe(...)`
  called directly on the same prepared tensors (float32 weights, int32 ids and a
  preallocated output, so the direct call is the bare kernel). Measured two ways:
  (1) groups of back-to-back calls in rotated order (glue, direct, direct with a
  fresh output, and a prototype of leaner per-call checks written here), median and
  spread of each and of the per-group difference to the direct call; (2) the glue
  alone, with the module's op lookup pointed at a no-op for the duration of the
  measurement: thousands of calls in a row (warm), and one call right after a real
  kernel call (cold), whole and piece by piece. Goal < 2% of kernel time.

Before each timed kernel call the script waits (up to 1 s) for the shared machine to
be quiet; best-of and median are both reported.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C
import torch
from layoutc_generated import vllm_cpu_grouped_gemm as m

from layoutc.tools.tp import per_expert_loop, reference_moe

HIDDEN, INTERMEDIATE, TP, ACT = 2816, 704, 4, "gelu_tanh"
BF16 = torch.bfloat16
GOAL_GLUE = 0.02


def kernel_library() -> str | None:
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "/vllm/_C" in line and line.endswith(".so"):
            return line.split()[-1]
    return None


def routing(tokens: int, experts: int, top_k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.rand(tokens, experts, generator=gen)
    top = scores.topk(top_k, dim=-1)
    return top.values.softmax(-1).float().contiguous(), top.indices.to(torch.int32).contiguous()


def timed(fn: Any, repeats: int, quiet: bool = True) -> list[float]:
    out = []
    for _ in range(repeats):
        if quiet:
            C.wait_for_quiet(0.3, 0.05, 1.0)
        t0 = time.perf_counter()
        r = fn()
        out.append(time.perf_counter() - t0)
        del r
    return out


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref).norm() / ref.norm())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=9, help="timed calls per kernel / loop row")
    ap.add_argument("--pairs", type=int, default=200,
                    help="groups of (glue, direct, direct+alloc) calls at 64 tokens, order rotated per group")
    ap.add_argument("--out", default="kernel.json", help="file name under bench/results")
    ap.add_argument("--skip-loop", action="store_true", help="only the one-time cost and the glue overhead")
    ap.add_argument("--glue-calls", type=int, default=3000, help="calls of the glue alone (no-op kernel)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    before = C.load()
    print(f"load before: {before['uptime']}", flush=True)
    e = args.experts
    plan = m.plan(num_experts=e, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, tp_size=TP, isa="vec",
                  activation=ACT, dtype="bfloat16")
    i_pp, padded = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
    torch.manual_seed(0)
    w13 = torch.empty(e, 2 * i_pp, HIDDEN, dtype=BF16).normal_(0, HIDDEN ** -0.5)  # one rank's logical shard
    w2 = torch.empty(e, HIDDEN, i_pp, dtype=BF16).normal_(0, i_pp ** -0.5)

    # ---- one-time cost -----------------------------------------------------------------
    m.load_kernel()
    one_time: dict[str, list[float]] = {"pad_w13+pad_w2 (fresh)": [], "prepack_padded": [],
                                        "prepack (pad + prepack)": []}
    packed: tuple[torch.Tensor, torch.Tensor] | None = None
    first: dict[str, float] = {}
    for r in range(4):
        C.wait_for_quiet(0.3, 0.05, 1.0)
        t0 = time.perf_counter()
        p13, p2 = m.pad_w13(w13, plan), m.pad_w2(w2, plan)
        t1 = time.perf_counter()
        k13, k2 = m.prepack_padded(p13, p2, plan)
        t2 = time.perf_counter()
        del p13, p2, k13, k2
        packed = None  # drop the last round's weights untimed (freeing 400 MiB is not free)
        C.wait_for_quiet(0.3, 0.05, 1.0)
        t3 = time.perf_counter()
        packed = m.prepack(w13, w2, plan)
        t4 = time.perf_counter()
        if r == 0:
            first = {"pad": t1 - t0, "prepack_padded": t2 - t1, "prepack": t4 - t3}
            continue  # the first round (library load, first faults) is reported apart
        one_time["pad_w13+pad_w2 (fresh)"].append(t1 - t0)
        one_time["prepack_padded"].append(t2 - t1)
        one_time["prepack (pad + prepack)"].append(t4 - t3)
    assert packed is not None
    pw13, pw2 = packed
    lib = kernel_library()
    print(f"kernel library: {lib}", flush=True)

    # ---- kernel vs per-expert loop ----------------------------------------------------------
    gen = torch.Generator().manual_seed(1)
    rows: list[dict[str, Any]] = []
    for tokens in (() if args.skip_loop else (64, 512)):
        for top_k in (2, 8):
            x = torch.empty(tokens, HIDDEN, dtype=BF16).normal_(generator=gen)
            tw, ti = routing(tokens, e, top_k, gen)
            ref = reference_moe(x, w13, w2, tw, ti, ACT)
            k_out = m.fused_moe(x, pw13, pw2, tw, ti, plan)
            l_out = per_expert_loop(x, w13, w2, tw, ti, ACT)
            kt, lt = [], []
            kernel_call = functools.partial(m.fused_moe, x, pw13, pw2, tw, ti, plan)
            loop_call = functools.partial(per_expert_loop, x, w13, w2, tw, ti, ACT)
            for _ in range(args.repeats):  # interleaved
                kt += timed(kernel_call, 1)
                lt += timed(loop_call, 1)
            ks, ls = C.stats(kt), C.stats(lt)
            rows.append({"tokens": tokens, "top_k": top_k, "kernel": ks, "loop": ls,
                         "speedup_best": ls["best_ms"] / ks["best_ms"],
                         "speedup_median": ls["median_ms"] / ks["median_ms"],
                         "rel_err_kernel": rel_err(k_out, ref), "rel_err_loop": rel_err(l_out, ref)})
            print(f"  tokens {tokens} top-{top_k}: kernel {ks['best_ms']:.2f} ms, loop {ls['best_ms']:.2f} ms",
                  flush=True)

    # ---- glue overhead at 64 tokens -------------------------------------------------------------
    op = torch.ops._C.cpu_fused_moe
    glue: list[dict[str, Any]] = []

    def glue_case(top_k: int) -> dict[str, Any]:
        x = torch.empty(64, HIDDEN, dtype=BF16).normal_(generator=gen)
        tw, ti = routing(64, e, top_k, gen)
        out = torch.empty_like(x)

        def direct() -> torch.Tensor:
            op(out, x, pw13, pw2, None, None, tw, ti, False, ACT, "vec")
            return out

        def wrapped() -> torch.Tensor:
            return m.fused_moe(x, pw13, pw2, tw, ti, plan)

        def direct_alloc() -> torch.Tensor:
            fresh = torch.empty_like(x)
            op(fresh, x, pw13, pw2, None, None, tw, ti, False, ACT, "vec")
            return fresh

        def lean() -> torch.Tensor:
            # a prototype of leaner per-call checks (plan and packed weights validated once,
            # elsewhere): attribute compares, one aminmax for the ids, one host sync
            if x.dim() != 2 or x.shape[1] != HIDDEN or x.dtype != BF16 or not x.is_contiguous():
                raise ValueError("hidden_states")
            if ti.shape != tw.shape or ti.shape[0] != x.shape[0]:
                raise ValueError("routing shapes")
            lo, hi = torch.aminmax(ti)
            if int(lo) < 0 or int(hi) >= e:
                raise ValueError("topk_ids out of range")
            w = tw if tw.dtype == torch.float32 and tw.is_contiguous() else tw.float().contiguous()
            ids = ti if ti.dtype == torch.int32 and ti.is_contiguous() else ti.int().contiguous()
            fresh = torch.empty_like(x)
            m._op("_C::cpu_fused_moe")(fresh, x, pw13, pw2, None, None, w, ids, False, ACT, "vec")
            return fresh

        assert torch.equal(direct().clone(), wrapped())
        assert torch.equal(lean(), wrapped())
        variants = {"glue": wrapped, "direct": direct, "direct+alloc": direct_alloc, "lean prototype": lean}
        names = list(variants)
        for _ in range(10):
            for fn in variants.values():
                fn()
        t: dict[str, list[float]] = {n: [] for n in names}
        for p in range(args.pairs):
            # a quiet window, one untimed call to wake the thread pool, then the three
            # variants back to back in rotated order
            C.wait_for_quiet(0.3, 0.05, 1.0)
            direct()
            for n in names[p % len(names):] + names[:p % len(names)]:
                t0 = time.perf_counter()
                variants[n]()
                t[n].append(time.perf_counter() - t0)
        g_t, d_t, a_t, l_t = t["glue"], t["direct"], t["direct+alloc"], t["lean prototype"]
        diff = [g - d for g, d in zip(g_t, d_t, strict=True)]
        # the glue alone: point the module's op lookup at a no-op. Warm: thousands of
        # calls in a row. Cold: one call right after a real kernel call (as in a model,
        # where the kernel has just streamed the weights through the caches).
        saved = m._op
        noop = lambda qualified: (lambda *a: None)  # noqa: E731
        m._op = noop
        try:
            alone = timed(wrapped, args.glue_calls, quiet=False)
        finally:
            m._op = saved
        pieces = {"whole glue": wrapped,
                  "prototype: lean per-call checks (not layoutc)": lean,
                  "_require_supported(plan)": lambda: m._require_supported(plan),
                  "_check_isa + load_kernel": lambda: (m._check_isa(plan), m.load_kernel()),
                  "_check_hidden": lambda: m._check_hidden(x, plan, BF16),
                  "2x (*_shapes + _check_tensor) packed": lambda: (
                      m._check_tensor("w13", pw13, m.w13_shapes(plan)[1], BF16),
                      m._check_tensor("w2", pw2, m.w2_shapes(plan)[1], BF16)),
                  "_check_routing": lambda: m._check_routing(64, tw, ti, e),
                  "torch.empty_like(x)": lambda: torch.empty_like(x)}
        cold: dict[str, list[float]] = {k: [] for k in pieces}
        for _ in range(60):
            for k, fn in pieces.items():
                direct()
                m._op = noop
                try:
                    t0 = time.perf_counter()
                    fn()
                    cold[k].append(time.perf_counter() - t0)
                finally:
                    m._op = saved
        cold_us = {k: statistics.median(v) * 1e6 for k, v in cold.items()}
        gs, ds = C.stats(g_t), C.stats(d_t)
        diffs = sorted(diff)
        glue_alone_us = statistics.median(alone) * 1e6
        kernel_med_us = ds["median_ms"] * 1e3
        print(f"  glue top-{top_k}: direct {ds['median_ms']:.3f} ms, glue alone {glue_alone_us:.1f} us warm, "
              f"{cold_us['whole glue']:.1f} us right after a kernel call", flush=True)
        return {
            "tokens": 64, "top_k": top_k, "groups": args.pairs, "glue": gs, "direct": ds,
            "direct_alloc": C.stats(a_t),
            "alloc_diff_median_us": statistics.median(a - d for a, d in zip(a_t, d_t, strict=True)) * 1e6,
            "lean_prototype": C.stats(l_t),
            "lean_diff_median_us": statistics.median(a - d for a, d in zip(l_t, d_t, strict=True)) * 1e6,
            "lean_overhead_fraction": statistics.median(a - d for a, d in zip(l_t, d_t, strict=True))
            / statistics.median(d_t),
            "paired_diff_median_us": statistics.median(diff) * 1e6,
            "paired_diff_iqr_us": (diffs[3 * len(diffs) // 4] - diffs[len(diffs) // 4]) * 1e6,
            "paired_overhead_fraction": statistics.median(diff) / statistics.median(d_t),
            "glue_alone_calls": args.glue_calls, "glue_alone_median_us": glue_alone_us,
            "glue_alone_best_us": min(alone) * 1e6,
            "glue_alone_p90_us": sorted(alone)[int(0.9 * len(alone))] * 1e6,
            "glue_alone_fraction": glue_alone_us / kernel_med_us,
            "glue_cold_after_kernel_median_us": cold_us["whole glue"],
            "glue_cold_fraction": cold_us["whole glue"] / kernel_med_us,
            "cold_pieces_median_us": cold_us,
            "goal": GOAL_GLUE,
            "met": glue_alone_us / kernel_med_us < GOAL_GLUE and statistics.median(diff) / statistics.median(d_t)
            < GOAL_GLUE,
        }

    for top_k in (8, 2):
        glue.append(glue_case(top_k))
    after = C.load()

    # ---- report ----------------------------------------------------------------------------------
    print(f"\ngemma-4-26B-A4B MoE layer, tp={TP}: I_pp {i_pp} -> {padded}, {e} experts, {ACT}, bf16, "
          f"{torch.get_num_threads()} threads, isa vec")
    print(C.table([[r["tokens"], r["top_k"], f"{r['kernel']['best_ms']:.2f}", f"{r['kernel']['median_ms']:.2f}",
                    f"{r['loop']['best_ms']:.2f}", f"{r['loop']['median_ms']:.2f}", f"{r['speedup_best']:.2f}x",
                    f"{r['speedup_median']:.2f}x", f"{r['rel_err_kernel']:.4f}", f"{r['rel_err_loop']:.4f}"]
                   for r in rows],
                  ["tokens", "top-k", "kernel best ms", "kernel median ms", "loop best ms", "loop median ms",
                   "speedup (best)", "speedup (median)", "rel err kernel", "rel err loop"]))
    print()
    ot = {k: C.stats(v) for k, v in one_time.items()}
    print(C.table([[k, f"{v['best_ms']:.1f}", f"{v['median_ms']:.1f}"] for k, v in ot.items()]
                  + [[f"first call: {k}", f"{v * 1e3:.1f}", ""] for k, v in first.items()],
                  ["one-time cost", "best ms", "median ms"]))
    print()
    print(C.table([[g["top_k"], f"{g['direct']['median_ms']:.3f}", f"{g['direct']['iqr_ms']:.3f}",
                    f"{g['glue']['median_ms']:.3f}", f"{g['glue']['iqr_ms']:.3f}",
                    f"{g['paired_diff_median_us']:.1f} (IQR {g['paired_diff_iqr_us']:.1f})",
                    f"{100 * g['paired_overhead_fraction']:.2f}%",
                    f"{g['alloc_diff_median_us']:.1f}",
                    f"{g['glue_alone_median_us']:.1f}", f"{100 * g['glue_alone_fraction']:.2f}%",
                    f"{g['glue_cold_after_kernel_median_us']:.1f}", f"{100 * g['glue_cold_fraction']:.2f}%",
                    C.verdict(g["met"])] for g in glue],
                  ["top-k", "direct median ms", "direct IQR ms", "glue median ms", "glue IQR ms",
                   "glue-direct us", "paired overhead", "alloc-direct us", "glue alone warm us", "warm / kernel",
                   "glue alone cold us", "cold / kernel", "< 2%"]))
    print()
    print(C.table([[k] + [f"{g['cold_pieces_median_us'][k]:.1f}" for g in glue] for k in glue[0]["cold_pieces_median_us"]],
                  ["glue piece, one call right after a kernel call (no-op op)"] + [f"top-{g['top_k']} us" for g in glue]))
    print(f"load after: {after['uptime']}")
    payload = {"benchmark": "kernel", "model": "gemma-4-26B-A4B", "hidden_size": HIDDEN,
               "intermediate_size": INTERMEDIATE, "tp_size": TP, "I_pp": i_pp, "I_pp_padded": padded,
               "num_experts": e, "activation": ACT, "dtype": "bfloat16", "isa": "vec", "threads": 2,
               "kernel_library": lib, "machine": C.machine(), "git": C.git_state(), "load_before": before, "load_after": after,
               "one_time": ot, "one_time_first_call_ms": {k: v * 1e3 for k, v in first.items()},
               "kernel_vs_loop": rows, "glue_overhead": glue}
    print(f"wrote {C.write_json(args.out, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
