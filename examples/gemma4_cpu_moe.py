"""The main job, end to end, on gemma-4-26B-A4B's real MoE shapes.

contract -> `layoutc verify` (z3, every admitted size) -> `layoutc compile` (a fresh
module in a temp dir) -> for each tp: every rank's shard taken from one full
logical checkpoint layer with the generated `shard_*`, prepacked and run on the
real vLLM CPU kernel (`_C::cpu_fused_moe`); the ranks' partial outputs are summed
(row-parallel w2) and compared with an unpadded float32 reference of the whole layer.

Shapes: hidden 2816, intermediate 704, top-8, gelu_tanh (gemma-4-26B-A4B), with
random weights and fewer experts than the model's 128 to keep it quick
(`--experts 128` runs the real count). At tp=4 the shard is 176 rows, which the
kernel cannot take (176 % 32 != 0): the contract pads it to 192 per half.

Run: python examples/gemma4_cpu_moe.py [--experts 32] [--tokens 64] [--isa vec]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contracts" / "vllm_cpu_grouped_gemm.moe"
HIDDEN, INTERMEDIATE, TOP_K, ACTIVATION = 2816, 704, 8, "gelu_tanh"


def verify_and_compile(out_dir: str) -> ModuleType:
    """Verify the contract, compile it into `out_dir`, and import the fresh module."""
    import contextlib
    import io

    from layoutc.cli import main

    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        verified = main(["verify", str(CONTRACT)])
    if verified != 0:
        print(report.getvalue())
        sys.exit("verification failed")
    lines = report.getvalue().splitlines()
    print(f"layoutc verify {CONTRACT.relative_to(ROOT)}:")
    print("\n".join(line for line in lines[1:] if line.startswith("  ") and "s  " in line))
    with contextlib.redirect_stdout(io.StringIO()):
        if main(["compile", str(CONTRACT), "--out", out_dir]) != 0:
            sys.exit("compile failed")
    print(f"layoutc compile: a fresh vllm_cpu_grouped_gemm module in {out_dir}")
    # The compile output is a package (its modules import the shared `_runtime/` relatively).
    package = "gemma4_example_generated"
    spec = importlib.util.spec_from_file_location(
        package, Path(out_dir) / "__init__.py", submodule_search_locations=[out_dir])
    assert spec is not None and spec.loader is not None
    sys.modules[package] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[package])
    module = importlib.import_module(f"{package}.vllm_cpu_grouped_gemm")
    return module


def reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor, intermediate: int) -> torch.Tensor:
    """Unpadded float32 MoE layer: out = sum_k w_k * w2[e] @ (gelu_tanh(gate) * up)."""
    out = torch.zeros(x.shape[0], w2.shape[1])
    xf = x.float()
    for e in range(w13.shape[0]):
        tok, slot = (topk_ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = xf[tok] @ w13[e].float().T
        act = torch.nn.functional.gelu(h[:, :intermediate], approximate="tanh") * h[:, intermediate:]
        out.index_add_(0, tok, (act @ w2[e].float().T) * topk_weights[tok, slot, None])
    return out


def per_expert_loop(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                    topk_ids: torch.Tensor, intermediate: int) -> torch.Tensor:
    """What an engine runs when it silently falls back: a torch loop over experts, in bf16."""
    out = torch.zeros_like(x)
    for e in range(w13.shape[0]):
        tok, slot = (topk_ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = x[tok] @ w13[e].T
        act = torch.nn.functional.gelu(h[:, :intermediate], approximate="tanh") * h[:, intermediate:]
        out.index_add_(0, tok, (act @ w2[e].T) * topk_weights[tok, slot, None].to(x.dtype))
    return out


def best_of(fn, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--isa", default="vec", choices=("vec", "amx", "neon", "vsx"))
    parser.add_argument("--tp", default="1,2,4,8")
    args = parser.parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16
    experts, tokens = args.experts, args.tokens
    # One full logical checkpoint layer: w13 = [gate (I rows) | up (I rows)].
    w13 = (torch.randn(experts, 2 * INTERMEDIATE, HIDDEN) / HIDDEN**0.5).to(dtype)
    w2 = (torch.randn(experts, HIDDEN, INTERMEDIATE) / INTERMEDIATE**0.5).to(dtype)
    x = torch.randn(tokens, HIDDEN).to(dtype)
    top_k = min(TOP_K, experts)  # gemma-4 routes to 8; fewer when fewer experts are asked for
    topk_ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)]).to(torch.int32)
    topk_weights = torch.rand(tokens, top_k).softmax(-1)
    expected = reference(x, w13, w2, topk_weights, topk_ids, INTERMEDIATE)

    with tempfile.TemporaryDirectory() as out_dir:
        m = verify_and_compile(out_dir)
        print(f"\ngemma-4-26B-A4B MoE layer: hidden {HIDDEN}, intermediate {INTERMEDIATE}, {experts} experts, "
              f"top-{top_k}, {tokens} tokens, bf16, isa={args.isa}, {torch.get_num_threads()} threads")
        header = f"{'tp':>3} {'I_pp':>5} {'padded':>7} {'rel err':>9} {'max abs err':>12} " \
                 f"{'kernel ms':>10} {'loop ms':>8} {'speedup':>8}"
        print(header)
        print("-" * len(header))
        failures = 0
        for tp in (int(t) for t in args.tp.split(",")):
            plan = m.plan(num_experts=experts, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, tp_size=tp,
                          isa=args.isa, activation=ACTIVATION, dtype=dtype)
            partial = torch.zeros(tokens, HIDDEN)
            kernel_s = loop_s = 0.0
            for rank in range(tp):
                packed_w13, packed_w2 = m.prepack_padded(m.shard_w13(w13, rank, plan), m.shard_w2(w2, rank, plan),
                                                         plan)
                out = m.fused_moe(x, packed_w13, packed_w2, topk_weights, topk_ids, plan)
                partial += out.float()  # the all-reduce of row-parallel w2
                if rank == 0:
                    kernel_s = best_of(lambda a=packed_w13, b=packed_w2, p=plan: m.fused_moe(x, a, b, topk_weights, topk_ids, p))
                    i_pp = plan.intermediate_size_per_partition
                    shard13 = torch.cat([w13[:, :i_pp], w13[:, INTERMEDIATE:INTERMEDIATE + i_pp]], dim=1)
                    shard2 = w2[:, :, :i_pp].contiguous()
                    loop_s = best_of(lambda a=shard13, b=shard2, n=i_pp: per_expert_loop(x, a, b, topk_weights, topk_ids, n))
            rel = float((partial - expected).norm() / expected.norm())
            max_abs = float((partial - expected).abs().max())
            ok = rel < 2e-2
            failures += not ok
            print(f"{tp:>3} {plan.intermediate_size_per_partition:>5} "
                  f"{plan.intermediate_size_per_partition_padded:>7} {rel:>9.4f} {max_abs:>12.4f} "
                  f"{kernel_s * 1e3:>10.2f} {loop_s * 1e3:>8.2f} {loop_s / kernel_s:>7.1f}x"
                  + ("" if ok else "  <-- above the bf16 tolerance 2e-2"))
        print("\nkernel ms / loop ms: one rank's layer (rank 0), best of 5; relative error: Frobenius norm of the "
              "summed ranks against the unpadded float32 reference.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
