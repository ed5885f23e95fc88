"""Per-call cost of handing an EP rank's kernel only its routed, local pairs (issue 39 item 2).

    python bench/ep_pairs_bench.py [--threads N]

One EP rank of a real-width layer on the real vLLM CPU kernel (vllm_cpu_grouped_gemm, bf16,
H 2048, I 768, 128 experts over ep 4 = 32 local, top 8, router top-k of random logits), at
decode (1, 4, 16 tokens) and prefill (512) sizes. Two paths:

- old: weight 0 on local id 0 for every foreign pair (to_local before issue 39), the kernel
  on all tokens x 8 pairs;
- new: `expert_map.run_local` (the generated fused_moe's path): the rank's local pairs only,
  one top_k-1 row each, added back per token in float32.

For each it reports the routing work alone (remap; and gather + scatter for the new path) and
the whole call, medians in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch


def old_to_local(weights: torch.Tensor, ids: torch.Tensor, emap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """layoutc's expert_map.to_local before issue 39 (range check, then weight 0 on local id 0)."""
    low, high = (int(v) for v in torch.aminmax(ids))
    assert low >= 0 and high < emap.shape[0]
    local = emap[ids.to(torch.long)]
    foreign = local < 0
    return weights.masked_fill(foreign, 0), local.masked_fill(foreign, 0).to(torch.int32).contiguous()


def median_us(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rank", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from layoutc_generated import vllm_cpu_grouped_gemm as m
    from layoutc_generated._runtime import expert_map

    m.load_kernel()
    experts, ep, hidden, inter, top_k = 128, 4, 2048, 768, 8
    plan = m.plan(
        num_experts=experts,
        hidden_size=hidden,
        intermediate_size=inter,
        tp_size=1,
        isa="vec",
        activation="silu",
        dtype="bfloat16",
        ep_size=ep,
    )
    count, emap = m.local_experts(args.rank, plan)
    assert emap is not None
    torch.manual_seed(0)
    w13 = (torch.randn(count, 2 * inter, hidden) / hidden**0.5).to(torch.bfloat16)
    w2 = (torch.randn(count, hidden, inter) / inter**0.5).to(torch.bfloat16)
    packed13, packed2 = m.prepack(w13, w2, plan)
    cfg = m._config(plan)

    def kernel(x: torch.Tensor, w: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return m._glue.fused_moe(cfg, x, packed13, packed2, w, i)

    print(
        f"vllm_cpu_grouped_gemm bf16 H {hidden} I {inter} E {experts} ep {ep} (rank {args.rank}, {count} local) "
        f"top {top_k}, {torch.get_num_threads()} thread(s); medians in us"
    )
    print(
        f"{'tokens':>6} {'local pairs':>11} | {'route old':>9} {'route new':>9} | {'call old':>9} {'call new':>9} "
        f"{'new/old':>7}"
    )
    for tokens in (1, 4, 16, 512):
        repeat = 300 if tokens <= 16 else 30
        x = torch.randn(tokens, hidden).to(torch.bfloat16)
        logits = torch.randn(tokens, experts)
        weights, ids = torch.topk(logits.softmax(-1), top_k)
        ids = ids.to(torch.int32)
        pairs = expert_map.local_pairs("bench", weights, ids, emap)
        n = int(pairs.rows.shape[0]) if pairs.rows is not None else tokens * top_k
        y = torch.zeros(n, hidden, dtype=torch.bfloat16)

        def route_new(weights=weights, ids=ids, x=x, y=y) -> object:  # type: ignore[no-untyped-def]
            p = expert_map.local_pairs("bench", weights, ids, emap)
            p.gather(x)
            return p.scatter(y)

        def call_old(weights=weights, ids=ids, x=x) -> object:  # type: ignore[no-untyped-def]
            w, i = old_to_local(weights, ids, emap)
            return kernel(x, w, i)

        def call_new(weights=weights, ids=ids, x=x) -> object:  # type: ignore[no-untyped-def]
            return expert_map.run_local("bench", kernel, x, weights, ids, emap)

        r_old = median_us(lambda weights=weights, ids=ids: old_to_local(weights, ids, emap), repeat)
        r_new = median_us(route_new, repeat)
        c_old = median_us(call_old, repeat)
        c_new = median_us(call_new, repeat)
        print(f"{tokens:>6} {n:>11} | {r_old:>9.1f} {r_new:>9.1f} | {c_old:>9.1f} {c_new:>9.1f} {c_new / c_old:>7.2f}")


if __name__ == "__main__":
    main()
