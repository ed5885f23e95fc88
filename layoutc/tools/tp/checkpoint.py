"""`run_tp_checkpoint`: one MoE layer of a real safetensors checkpoint over `tp_size` gloo ranks.

Each rank reads only its own rows through the generated loaders
(layoutc.tools.checkpoints), and rank 0 compares with transformers' own sparse-MoE block
of the layer (its routed output; the launcher computes it once, with the routing the
block's router chose, and hands both to the ranks). layoutc.tools.checkpoints and
layoutc.tools.run are imported when a run starts (they need safetensors).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from layoutc.runtime.experts import check_ep, check_placement
from layoutc.tools.contract_module import import_contract_module, kernel_of, layout_of
from layoutc.tools.routes import run_contract
from layoutc.tools.tp.launcher import launch_ranks
from layoutc.tools.tp.rank import collective, init_rank, report_error
from layoutc.tools.tp.results import CheckpointTPResult


def checkpoint_rank(rank: int, tp_size: int, port: int, module_name: str, cfg: dict[str, Any],
                    tensors: dict[str, torch.Tensor], results: Any) -> None:
    """One rank of `run_tp_checkpoint`: its own checkpoint reads, kernel, gloo all_reduce.

    tensors: x [T, H] (model dtype), topk_weights / topk_ids [T, top_k] and, on rank 0's
    side, ref [T, H] float32, all computed once by the launcher."""
    try:
        init_rank(rank, tp_size, port, cfg)
        try:
            report = _checkpoint_layer(rank, tp_size, module_name, cfg, tensors)
            results.put(("report", rank, report))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:
        report_error(results, rank, exc)
        raise


def _checkpoint_layer(rank: int, tp_size: int, module_name: str, cfg: dict[str, Any],
                      tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """This rank's body of the one rank loop (layoutc.tools.rankloop.run_ranks over this process's rank, with
    run's dense or EP strategy: load its rows, prepack, run the kernel), then the all-reduce; the timings
    (and rank 0's error)."""
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.ep_run import EPRanks
    from layoutc.tools.rankloop import RankStrategy, run_ranks
    from layoutc.tools.run import DenseRanks, checkpoint_plan, halves_error

    mod = import_contract_module(module_name)
    ep = cfg.get("ep_size", 1)
    kernel = kernel_of(layout_of(mod))
    with Checkpoint(cfg["model_dir"]) as ckpt:
        moe = describe(ckpt.config, cfg["format"], ckpt.weight_map)
        options = {"apply_router_weight_on_input": True} if cfg["on_input"] else {}
        strategy: RankStrategy
        ident: Any
        if ep > 1:  # world rank -> (EP rank, TP rank), TP fastest: the one mapping ep_run uses
            from layoutc.runtime.experts import world_ranks

            tp = cfg["tp_size"]
            ep_ranks = EPRanks(ckpt, moe, mod, cfg["layer"], tp, ep, cfg["dtype"], cfg["isa"],
                               cfg.get("expert_placement", "linear"), kernel.fused_moe, options)
            strategy, ident = ep_ranks, world_ranks(ep * tp, ep, tp)[rank]
        else:
            plan = checkpoint_plan(mod, moe, tp_size, cfg["dtype"], cfg["isa"])
            strategy, ident = DenseRanks(ckpt, moe, cfg["layer"], mod, plan, kernel, options), rank
        k = run_ranks(strategy, [ident], tensors["x"], (tensors["topk_weights"], tensors["topk_ids"]), warmup=False,
                      iters=1)
        plan = ep_ranks.plan if ep > 1 else plan
        out = k.output
        t1 = time.perf_counter()
        with collective():
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
        t2 = time.perf_counter()
        report: dict[str, Any] = {"load": k.load_s, "step": k.kernel_s + (t2 - t1),
                                  "plan": (plan.intermediate_size_per_partition,
                                           plan.intermediate_size_per_partition_padded)}
        if rank == 0:
            from layoutc.tools.checkpoints.block import block_ops, combine

            step = combine(out, tensors["x"], tensors["block_weights"], tensors["block_ids"], block_ops(moe),
                           moe.num_experts)
            report.update(rel_error=halves_error(step, tensors["ref"]))
    return report


def run_tp_checkpoint(model_dir: str, *, tp_size: int, layer: int | None = None,
                      module_name: str | None = None, dtype: str | None = None, tokens: int = 16,
                      seed: int = 0, isa: str = "vec", threads_per_rank: int = 1,
                      timeout_s: float = 300.0, use_transformers: bool = True,
                      checkpoint_format: Any = None, ep_size: int = 1,
                      expert_placement: str = "linear") -> CheckpointTPResult:
    """One MoE layer of a real safetensors checkpoint over `tp_size` gloo ranks.

    Before anything is loaded, the family's `router_weight` is held to what the module's
    glue computes (`layoutc.tools.run.router_weight_on_input`). Then this process builds
    the reference once (`layoutc.tools.checkpoints.reference.reference`: transformers' own
    sparse-MoE block of the layer as from_pretrained loads it, whose router also gives the
    routing every rank gets; `use_transformers=False` builds it from the declared format,
    `independent=False`). Every rank opens the checkpoint itself and loads only its rows
    through the generated `alloc_*` / `load_*` (the declared format of config.json's
    model_type, or `checkpoint_format`), prepacks, runs the real kernel (with
    `apply_router_weight_on_input=True` for a family that weights the experts' input) and
    all-reduces (SUM, model dtype); the w2 bias is loaded on rank 0 only. Rank 0 compares.
    ep_size > 1 (a contract with `experts ... over ep_size`): `ep_size * tp_size` ranks, world
    rank w being EP rank w // tp_size and TP rank w % tp_size; each keeps its EP rank's experts
    and runs the kernel with its expert map (layoutc.tools.ep_run.load_ep_rank) under vLLM's
    `expert_placement` ("linear" or "round_robin", the contract's `experts ... placement`).
    layer: a MoE layer index (default: the first). dtype: default the checkpoint's. module_name: a
    generated module (default: the one whose `route run {"unquantized"}` line serves unquantized
    checkpoints, layoutc/tools/routes.py; RunError LR126 when none does).
    Raises ValueError on bad arguments (ExpertParallelError EP03 for an unknown placement,
    EP01 for an ep_size above config.json's experts, both before any rank starts),
    layoutc.tools.run.RunError LR140 / LR141 when the
    glue cannot weight where the family does, FormatError for an unknown model_type,
    TPRankError naming the failing rank (e.g. the module's LayoutContractError for a refused
    configuration), TimeoutError past `timeout_s`.
    """
    for name, value in (("tp_size", tp_size), ("ep_size", ep_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"run_tp_checkpoint: {name} must be an int >= 1, got {value!r}")
    check_placement(expert_placement)  # ExpertParallelError EP03 before any rank starts
    name = module_name or run_contract("unquantized")
    inputs = _checkpoint_inputs(model_dir, name, layer, dtype, tokens, seed, use_transformers,
                                checkpoint_format, ep_size, expert_placement)
    cfg = {"model_dir": model_dir, "layer": inputs.layer, "dtype": inputs.dtype, "isa": isa,
           "on_input": inputs.on_input, "format": checkpoint_format, "threads_per_rank": threads_per_rank,
           "timeout_s": timeout_s, "tp_size": tp_size, "ep_size": ep_size, "expert_placement": expert_placement}
    world = tp_size * ep_size
    messages = launch_ranks("run_tp_checkpoint", checkpoint_rank, world, (name, cfg, inputs.tensors),
                            start_method="spawn", timeout_s=timeout_s)
    reports = {m[1]: m[2] for m in messages if m[0] == "report"}
    if sorted(reports) != list(range(world)):
        raise RuntimeError(f"run_tp_checkpoint: ranks {sorted(set(range(world)) - set(reports))} sent no report")
    i_pp, padded = reports[0]["plan"]
    ref = inputs.reference
    return CheckpointTPResult(model_dir, inputs.layer, tp_size, inputs.dtype, i_pp, padded, reports[0]["rel_error"],
                              ref.name, max(r["load"] for r in reports.values()),
                              max(r["step"] for r in reports.values()), ref.routing, ref.independent,
                              inputs.router_weight)


@dataclass(frozen=True)
class _CheckpointInputs:
    """What the launcher prepares once: the layer, its dtype, where the routing weight goes, the
    shared tensors (x, topk_weights, topk_ids, ref) and the reference (a checkpoints Reference)."""

    layer: int
    dtype: str
    on_input: bool
    router_weight: str
    tensors: dict[str, torch.Tensor]
    reference: Any


def _checkpoint_inputs(model_dir: str, module_name: str, layer: int | None, dtype: str | None, tokens: int,
                       seed: int, use_transformers: bool, checkpoint_format: Any, ep_size: int = 1,
                       expert_placement: str = "linear") -> _CheckpointInputs:
    """Hold the EP degree to config.json's experts (ExpertParallelError EP01 before any rank
    starts: each rank would raise it after the spawn) and the family's router weight to the
    glue and its activation (RunError LR142), pick the layer and dtype, build the reference on
    run_inputs' tokens (half scaled past every clamp config.json states; the error is the larger of the two halves')."""
    from layoutc.tools.checkpoints.activation import check_activation
    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.checkpoints.reference import reference, transformers_oracle
    from layoutc.tools.run import checkpoint_dtype, router_weight_on_input, run_inputs

    with Checkpoint(model_dir) as ckpt:
        moe = describe(ckpt.config, checkpoint_format, ckpt.weight_map)
        check_ep(moe.num_experts, ep_size, expert_placement)
        mod = import_contract_module(module_name)
        on_input = router_weight_on_input(moe, mod, module_name)
        if layer is None:
            layer = moe.moe_layers[0]
        if layer not in moe.moe_layers:
            raise ValueError(f"run_tp_checkpoint: layer {layer} is not a MoE layer ({list(moe.moe_layers)})")
        check_activation(moe, mod, module_name, [layer])  # RunError LR142: a clamp the glue does not compute
        dtype = dtype or checkpoint_dtype(ckpt, moe, layer)
        x, _, _ = run_inputs(ckpt, moe, layer, tokens, seed, dtype)  # half scaled past config.json's clamps
        oracle = transformers_oracle(model_dir, [layer]) if use_transformers else None
        ref = reference(ckpt, moe, layer, x, use_transformers=use_transformers, oracle=oracle,
                        why_no_oracle="" if use_transformers else "use_transformers=False")
        del oracle
    from layoutc.tools.checkpoints.block import kernel_routing

    # the kernel gets the routed slots; rank 0 applies the block's step after the experts to the
    # all-reduced output before comparing (checkpoints/block.py combine), from the block's own routing
    weights, ids = kernel_routing(ref.weights, ref.ids, moe.num_experts)
    tensors = {"x": x, "topk_weights": weights, "topk_ids": ids, "ref": ref.output, "block_weights": ref.weights,
               "block_ids": ref.ids}
    for t in tensors.values():
        t.share_memory_()
    return _CheckpointInputs(layer, dtype, on_input, moe.format.router_weight, tensors, ref)
