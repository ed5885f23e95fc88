"""The expert map of one EP rank, and routing from global to local expert ids.

The arithmetic is `experts.py`'s (stdlib); this module builds vLLM's int32 tensors from it
and applies them to router outputs before a kernel sees them.
"""

from __future__ import annotations

import torch

from .errors import LayoutContractError
from .experts import ExpertParallelError, check_ep, held, local_count


def local_experts(rank: int, plan: object) -> tuple[int, torch.Tensor | None]:
    """`(local_num_experts, expert_map)` of EP rank `rank` under `plan`.

    `plan` carries `num_experts` (logical), `ep_size`, `expert_placement` and, optionally,
    `num_redundant_experts` (EPLB; default 0): the placement runs over the physical experts
    `num_experts + num_redundant_experts`. `expert_map` is int32 `[physical experts]`: the
    local id of each expert this rank holds, -1 for every other; None when `ep_size == 1`
    (every expert is local), as vLLM returns it.
    Raises ExpertParallelError: EP01 (ep_size > experts), EP03 (unknown placement), EP06
    (rank outside 0..ep_size-1, or a size that is not a positive int).
    Source: vLLM 0.32 fused_moe/expert_map_manager.py `determine_expert_map`.
    """
    num_experts = getattr(plan, "num_experts", None)
    ep_size = getattr(plan, "ep_size", None)
    redundant = getattr(plan, "num_redundant_experts", 0)
    placement = check_ep(num_experts, ep_size, getattr(plan, "expert_placement", None), redundant)  # type: ignore[arg-type]
    assert isinstance(num_experts, int) and isinstance(ep_size, int)
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < ep_size:
        raise ExpertParallelError("EP06", f"EP rank {rank!r} is outside 0..{ep_size - 1}")
    physical = num_experts + redundant
    if ep_size == 1:
        return physical, None
    mine = held(rank, physical, ep_size, placement)
    assert len(mine) == local_count(physical, ep_size, rank)
    expert_map = torch.full((physical,), -1, dtype=torch.int32)
    if mine:
        expert_map[torch.tensor(mine, dtype=torch.long)] = torch.arange(len(mine), dtype=torch.int32)
    return len(mine), expert_map


def to_local(who: str, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
             expert_map: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Global router outputs -> what one rank's kernel may read: (weights, local ids).

    topk_weights: [tokens, top_k] floating; topk_ids: [tokens, top_k] integer global ids
    in [0, len(expert_map)). An id whose expert is foreign (`expert_map` -1) gets local
    id 0 and weight 0, so it contributes 0 on this rank: the CPU kernels do no bounds check
    (-1 corrupts the heap, see routing.py), so the -1 vLLM's `remap_topk_to_local` writes
    can never reach them. Returns int32 ids and weights of topk_weights' dtype, new tensors.
    With `expert_map` None (ep_size 1) both are returned unchanged.
    Raises LayoutContractError when an id is outside the global experts (or not integer).
    Source: vLLM 0.32 fused_moe/utils.py `remap_topk_to_local` (the -1 for foreign experts).
    """
    if expert_map is None:
        return topk_weights, topk_ids
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dtype.is_floating_point or topk_ids.dtype == torch.bool:
        raise LayoutContractError(f"{who}: topk_ids must be an integer tensor of global expert ids")
    physical = int(expert_map.shape[0])
    if topk_ids.numel():
        low, high = (int(v) for v in torch.aminmax(topk_ids))
        if low < 0 or high >= physical:
            raise LayoutContractError(f"{who}: global topk_ids must lie in [0, {physical}) (the model's "
                                      f"experts), got [{low}, {high}]")
    local = expert_map[topk_ids.to(torch.long)]
    foreign = local < 0
    weights = topk_weights.masked_fill(foreign, 0)
    return weights, local.masked_fill(foreign, 0).to(torch.int32).contiguous()


def refuse_global(who: str, topk_ids: torch.Tensor, local_num_experts: int, ep_size: int) -> None:
    """ExpertParallelError EP05 when an id reaches a rank's kernel at or above its experts axis.

    Under EP a kernel's experts axis holds the rank's `local_num_experts` only; a global id
    at or above it is one not remapped with `to_local` (vLLM 0.32's CPU grouped GEMM passes
    its global topk_ids straight to the kernel: cpu_moe.py `CPUUnquantizedExperts.apply`).
    """
    if ep_size > 1 and topk_ids.numel():
        high = int(topk_ids.max())
        if high >= local_num_experts:
            raise ExpertParallelError("EP05", f"{who}: expert id {high} reaches a kernel whose experts axis holds "
                                      f"this rank's {local_num_experts} experts (ep_size={ep_size}): remap global "
                                      "ids with expert_map.to_local first")
