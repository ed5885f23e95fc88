"""Quick paired measurement of the generated glue's overhead over the raw op.

gemma-4-26B-A4B shapes at tp=4 (176 -> 192), 128 experts, 64 tokens, bf16, 2 threads.
Per group: one direct kernel call (to leave the caches as a real forward does), then
`fused_moe(...)`, then a direct `_C::cpu_fused_moe` call with a fresh output; the
overhead is the median over 150 groups of (glue time - direct time).

    python bench/glue_overhead.py
"""

from __future__ import annotations

import statistics
import time

import torch
from layoutc_generated import vllm_cpu_grouped_gemm as m


def main() -> None:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    experts, hidden, tokens = 128, 2816, 64
    for top_k in (2, 8):
        plan = m.plan(num_experts=experts, hidden_size=hidden, intermediate_size=704, tp_size=4, isa="vec",
                      activation="gelu_tanh", dtype="bfloat16")
        w13 = (torch.randn(experts, 2 * 176, hidden) / 53).to(torch.bfloat16)
        w2 = (torch.randn(experts, hidden, 176) / 13).to(torch.bfloat16)
        a, b = m.prepack(w13, w2, plan)
        x = torch.randn(tokens, hidden).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)]).int()
        weights = torch.rand(tokens, top_k)
        op = torch.ops._C.cpu_fused_moe
        diffs, kernels = [], []
        for _ in range(150):
            op(torch.empty_like(x), x, a, b, None, None, weights, ids, False, "gelu_tanh", "vec")
            t0 = time.perf_counter()
            m.fused_moe(x, a, b, weights, ids, plan)
            t1 = time.perf_counter()
            op(torch.empty_like(x), x, a, b, None, None, weights, ids, False, "gelu_tanh", "vec")
            t2 = time.perf_counter()
            op(torch.empty_like(x), x, a, b, None, None, weights, ids, False, "gelu_tanh", "vec")
            t3 = time.perf_counter()
            diffs.append((t1 - t0) - (t3 - t2))
            kernels.append(t3 - t2)
        kernel, overhead = statistics.median(kernels), statistics.median(diffs)
        print(f"top-{top_k}: kernel {kernel * 1e3:.2f} ms, glue overhead {overhead * 1e6:.0f} us "
              f"= {100 * overhead / kernel:.2f}%")


if __name__ == "__main__":
    main()
