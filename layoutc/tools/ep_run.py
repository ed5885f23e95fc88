"""`layoutc run --ep`: one layer over `ep x tp` ranks, each rank holding its own experts.

World rank `w` is EP rank `w // tp`, TP rank `w % tp` (`runtime.experts.world_ranks`, TP
fastest as vLLM orders ranks). Each rank loads its TP shard of the layer through the
generated loaders at EP 1, keeps the experts its EP rank holds (`local_experts`, vLLM's
`determine_expert_map`) in the kernel's local experts axis, prepacks, and runs the real
kernel with the router's global ids and its expert map (foreign experts add 0). The ranks'
outputs are summed (the all-reduce of the EP and TP groups).

The loader reads every expert of the TP shard and then drops the foreign ones: the peak
memory per rank is that of the TP shard, not of the rank's experts.
"""

from __future__ import annotations

import time
from typing import Any

from layoutc.runtime.experts import world_ranks
from layoutc.tools.contract_module import kernel_of, layout_of
from layoutc.tools.runplan import KernelRun, RunError, checkpoint_plan


def _local(full: Any, held: list[int], axis: int) -> Any:
    """`full`'s experts `held`, in local-id order, in a zero [axis, ...] tensor (the spare
    slots of the last ranks are the contract's fill 0 and never routed to)."""
    import torch

    out = torch.zeros((axis, *full.shape[1:]), dtype=full.dtype)
    if held:
        out[: len(held)] = full[torch.tensor(held, dtype=torch.long)]
    return out


def load_ep_rank(ckpt: Any, moe: Any, mod: Any, layer: int, tp: int, ep: int, ep_rank: int, tp_rank: int, *,
                 dtype: str, isa: str) -> tuple[Any, Any, Any, dict[str, Any], Any]:
    """One rank's (plan, packed_w13, packed_w2, biases, expert_map) of `layer` at `ep x tp`.

    The rank's TP shard is read through the loaders at EP 1 and its EP rank's experts kept,
    in local-id order, in the plan's local experts axis. Raises as `ep_kernel_sum`.
    """
    from layoutc.tools.checkpoints.loader import load_layer_rank

    layout = layout_of(mod)
    kernel = kernel_of(layout)
    if layout.local_experts is None:
        raise RunError("LR120", f"{layout.contract} partitions no experts over EP ranks (no `experts ... over` "
                       "declaration): it cannot run at --ep > 1")
    whole = checkpoint_plan(mod, moe, tp, dtype, isa)  # EP 1: the loaders' shapes
    plan = layout.replan(whole, ep_size=ep)
    axis = int(plan.local_num_experts)
    count, emap = layout.local_experts(ep_rank, plan)
    held = list(range(moe.num_experts)) if emap is None else \
        sorted((e for e in range(moe.num_experts) if int(emap[e]) >= 0), key=lambda e: int(emap[e]))
    if len(held) != count:
        raise RunError("LR120", f"{layout.contract}: EP rank {ep_rank} holds {len(held)} of the checkpoint's "
                       f"{moe.num_experts} experts, but local_experts counts {count}")
    rw = load_layer_rank(ckpt, moe, layer, mod, whole, tp_rank)
    packed13, packed2 = kernel.prepack_padded(_local(rw.w13, held, axis), _local(rw.w2, held, axis), plan)
    bias = {} if rw.w13_bias is None else {"w13_bias": _local(rw.w13_bias, held, axis),
                                           "w2_bias": _local(rw.w2_bias, held, axis)}
    return plan, packed13, packed2, bias, emap


def ep_kernel_sum(ckpt: Any, moe: Any, mod: Any, layer: int, tp: int, ep: int, x: Any, weights: Any, ids: Any, *,
                  dtype: str, isa: str, options: dict[str, Any]) -> Any:
    """The summed output of `layer` over `ep * tp` ranks; returns run.KernelRun.

    x: [T, H] in `dtype`; weights / ids: [T, top_k], ids global. Raises the module's
    LayoutContractError (ExpertParallelError EP01/EP03 from plan(), EP02 from world_ranks)
    when the configuration is refused.
    """
    total = plan = None
    load_s = kernel_s = 0.0
    fused_moe = kernel_of(layout_of(mod)).fused_moe
    for ep_rank, tp_rank in world_ranks(ep * tp, ep, tp):
        t0 = time.perf_counter()
        plan, packed13, packed2, bias, emap = load_ep_rank(ckpt, moe, mod, layer, tp, ep, ep_rank, tp_rank,
                                                           dtype=dtype, isa=isa)
        t1 = time.perf_counter()
        part = fused_moe(x, packed13, packed2, weights, ids, plan, expert_map=emap, **bias, **options)
        kernel_s = max(kernel_s, time.perf_counter() - t1)
        load_s = max(load_s, t1 - t0)
        total = part.clone() if total is None else total.add_(part)
    assert total is not None
    return KernelRun(total, plan, load_s, kernel_s, 0.0)
