# Copied by `layoutc compile` from layoutc/runtime/expert_map.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""The expert map of one EP rank, and routing from global to local expert ids.

The arithmetic is `experts.py`'s (stdlib); this module builds vLLM's int32 tensors from it
and hands a rank's kernel only the router's pairs that the rank holds (`local_pairs`,
`run_local`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class LocalPairs:
    """The (token, expert) pairs one EP rank's kernel computes: only its routed, local pairs.

    rows: int64 [n]: the token of each kernel row, or None when every routed pair of every
        token is local (the kernel then runs on the router's rows unchanged: the fast path).
    weights: [n or tokens, k] routing weights of topk_weights' dtype (k is 1 when rows is
        set: one row per local pair); ids: int32 of the same shape, local expert ids.
    tokens: the router's token count.
    """

    rows: torch.Tensor | None
    weights: torch.Tensor
    ids: torch.Tensor
    tokens: int

    def gather(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The kernel's input rows: hidden_states [tokens, H] itself, or its rows `rows`."""
        return hidden_states if self.rows is None else hidden_states.index_select(0, self.rows).contiguous()

    def with_spare(self, x: torch.Tensor, local_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x, weights, ids) for a kernel that refuses a call whose rows reach one expert.

        zentorch_fused_moe raises "requires at least 2 active experts" (zentorch 2.13.0.1
        FusedMoE.cpp). When the compacted rows (x: `gather`'s [n, H]) reach one expert and
        the rank holds more, one spare row is appended: all zeros, weight 0, on another local
        expert. It is no token's row (`scatter` drops its output), so no token runs an
        expert it was not routed to. Otherwise (or on the fast path) returned unchanged.
        """
        if self.rows is None or not int(self.rows.shape[0]) or local_experts < 2:
            return x, self.weights, self.ids
        active = torch.unique(self.ids)
        if int(active.numel()) >= 2:
            return x, self.weights, self.ids
        other = 1 if int(active[0]) == 0 else 0
        return (torch.cat([x, x.new_zeros(1, x.shape[1])]), torch.cat([self.weights, self.weights.new_zeros(1, 1)]),
                torch.cat([self.ids, self.ids.new_full((1, 1), other)]))

    def scatter(self, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The rank's partial sum [tokens, H] from the kernel's output y [n, H] (same dtype;
        rows past n, a `with_spare` row, are dropped).

        Each token's local pairs are added in float32 and rounded once to y's dtype; a token
        with no local pair is exactly 0. `out`: write there ([tokens, H], y's dtype) instead.
        """
        if self.rows is None:
            return y if out is None else out.copy_(y)
        acc = torch.zeros(self.tokens, y.shape[1], dtype=torch.float32, device=y.device)
        acc.index_add_(0, self.rows, y[: int(self.rows.shape[0])].float())
        return acc.to(y.dtype) if out is None else out.copy_(acc)


def local_pairs(who: str, topk_weights: torch.Tensor, topk_ids: torch.Tensor, expert_map: torch.Tensor,
                *, input_weighted: bool = False) -> LocalPairs:
    """The pairs of the router's output that this rank holds, remapped to local ids.

    topk_weights: [tokens, top_k] floating; topk_ids: [tokens, top_k] integer global ids in
    [0, len(expert_map)); expert_map: int32 [physical experts] from `local_experts` (-1: a
    foreign expert). A foreign pair is never handed to the kernel: when every pair is local
    the ids are remapped in place of the router's (LocalPairs.rows None); otherwise each local
    pair becomes its own kernel row with top_k 1 (LocalPairs.gather / scatter move the
    tokens), and a token with no local pair gets no row. Neither vLLM's -1 (the CPU kernels
    do no bounds check: it corrupts the heap, routing.py) nor weight 0 on some local expert
    (that expert still runs on the token: 0 x an overflowed activation is NaN, issue 39) can
    make a foreign pair add exactly 0. input_weighted: the kernel weights its input (vLLM's
    apply_router_weight_on_input), which vLLM's CPU kernels compute at top_k 1 only.
    Raises LayoutContractError when an id is outside the global experts (or not integer),
    when the weights are not a tensor of the ids' shape [tokens, top_k], or when
    input_weighted meets a top_k other than 1.
    Source: vLLM 0.32 fused_moe/utils.py `remap_topk_to_local` (the -1 for foreign experts).
    """
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dtype.is_floating_point or topk_ids.dtype == torch.bool:
        raise LayoutContractError(f"{who}: topk_ids must be an integer tensor of global expert ids")
    if topk_ids.dim() != 2 or not isinstance(topk_weights, torch.Tensor) or topk_weights.shape != topk_ids.shape:
        got = tuple(topk_weights.shape) if isinstance(topk_weights, torch.Tensor) else type(topk_weights).__name__
        raise LayoutContractError(f"{who}: topk_ids must be [tokens, top_k] and topk_weights the same shape, got "
                                  f"{tuple(topk_ids.shape)} and {got}")
    tokens, top_k = (int(n) for n in topk_ids.shape)
    if input_weighted and top_k != 1:
        raise LayoutContractError(f"{who}: apply_router_weight_on_input needs top_k == 1, got top_k {top_k}")
    physical = int(expert_map.shape[0])
    if topk_ids.numel():
        low, high = (int(v) for v in torch.aminmax(topk_ids))
        if low < 0 or high >= physical:
            raise LayoutContractError(f"{who}: global topk_ids must lie in [0, {physical}) (the model's "
                                      f"experts), got [{low}, {high}]")
    local = expert_map[topk_ids.to(torch.long)]
    mine = local >= 0
    if bool(mine.all()):
        return LocalPairs(None, topk_weights, local.to(torch.int32).contiguous(), tokens)
    flat = mine.reshape(-1).nonzero().squeeze(1)
    return LocalPairs(flat // top_k, topk_weights.reshape(-1).index_select(0, flat).unsqueeze(1).contiguous(),
                      local.reshape(-1).index_select(0, flat).to(torch.int32).unsqueeze(1).contiguous(), tokens)


def run_local(who: str, kernel: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
              hidden_states: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
              expert_map: torch.Tensor | None, *, input_weighted: bool = False) -> torch.Tensor:
    """One EP rank's partial sum: `kernel(x, weights, ids)` on this rank's routed, local pairs only.

    hidden_states: [tokens, H]; topk_weights / topk_ids: [tokens, top_k], ids global (with
    `expert_map`) or already local (expert_map None: the kernel runs on them unchanged).
    kernel: the glue's forward on rows x [n, H] with weights/ids [n, k], returning [n, H].
    Returns [tokens, H] of the kernel's dtype: each token's local pairs (a token with none
    adds exactly 0), see `local_pairs`. Raises as `local_pairs`, LayoutContractError when
    hidden_states is not [tokens, H] for the router's tokens, and whatever `kernel` raises.
    """
    if expert_map is None:
        return kernel(hidden_states, topk_weights, topk_ids)
    pairs = local_pairs(who, topk_weights, topk_ids, expert_map, input_weighted=input_weighted)
    if pairs.rows is None:
        return kernel(hidden_states, pairs.weights, pairs.ids)
    if not isinstance(hidden_states, torch.Tensor) or hidden_states.dim() != 2 \
            or int(hidden_states.shape[0]) != pairs.tokens:
        got = tuple(hidden_states.shape) if isinstance(hidden_states, torch.Tensor) else type(hidden_states).__name__
        raise LayoutContractError(f"{who}: hidden_states must be [tokens, hidden_size] with the router's "
                                  f"{pairs.tokens} tokens, got {got}")
    return pairs.scatter(kernel(pairs.gather(hidden_states), pairs.weights, pairs.ids))


def refuse_global(who: str, topk_ids: torch.Tensor, local_num_experts: int, ep_size: int) -> None:
    """ExpertParallelError EP05 when an id reaches a rank's kernel at or above its experts axis.

    Under EP a kernel's experts axis holds the rank's `local_num_experts` only; a global id
    at or above it is one not remapped with `local_pairs` (vLLM 0.32's CPU grouped GEMM passes
    its global topk_ids straight to the kernel: cpu_moe.py `CPUUnquantizedExperts.apply`).
    """
    if ep_size > 1 and topk_ids.numel():
        high = int(topk_ids.max())
        if high >= local_num_experts:
            raise ExpertParallelError("EP05", f"{who}: expert id {high} reaches a kernel whose experts axis holds "
                                      f"this rank's {local_num_experts} experts (ep_size={ep_size}): remap global "
                                      "ids with the expert map first (fused_moe's expert_map=)")
