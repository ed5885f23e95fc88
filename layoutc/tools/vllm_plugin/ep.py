"""Expert parallelism inside vLLM's CPU grouped GEMM: global router ids -> the rank's local experts.

vllm 0.32.0 `CPUUnquantizedExperts.apply` (fused_moe/experts/cpu_moe.py) ignores its
`expert_map` argument and passes the router's global `topk_ids` to `_C::cpu_fused_moe`,
whose experts axis holds only this rank's `local_num_experts` (the kernel does no bounds
check). Under `enable_expert_parallel` the plugin therefore:

- replace: wraps `apply` so that, on a layer the replace hook planned with ep_size > 1, the
  kernel (`_C::cpu_fused_moe` or zentorch's) computes only the pairs routed to this rank's
  experts, with the local ids of the contract's `local_experts(ep_rank, plan)` map
  (layoutc.runtime.expert_map.local_pairs, the generated modules' path): when a token has a
  foreign pair (vLLM's expert_map -1), each local pair is its own top_k-1 row and the rows
  are added back per token in float32; a token with no local pair is 0 on this rank (zentorch,
  which refuses rows that reach one expert, gets one spare all-zero row that is no token's). No
  foreign pair runs any expert: weight 0 on some local expert still runs it, and 0 x an
  overflowed float16 activation is NaN (issue 39);
- check: refuses the layer at load (`refusal`), since vLLM's own forward would read
  experts out of bounds.

The map is derived from the contract; the replace hook holds it equal to vLLM's own
`ExpertMapManager.expert_map` at load (`expert_map` below), so the two cannot drift.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any

import torch

from layoutc.runtime.errors import LayoutContractError
from layoutc.runtime.expert_map import local_pairs
from layoutc.tools.vllm_plugin.errors import LayoutcVllmError

_MARK = "__layoutc_vllm_ep__"
# The attribute the replace hook sets on an experts instance: its contract expert_map.
MAP_ATTR = "_layoutc_expert_map"


def refusal(name: str, ep_size: int, local: int, total: int, contract: str) -> str:
    """Check mode's message for an EP layer (vLLM's forward would pass global ids to the kernel);
    `contract` is the contract the layer is held to (its `models` line picks it), whose expert map
    replace mode applies."""
    return (f"layoutc: layer {name}: vLLM runs it with expert parallelism (ep_size {ep_size}, {local} of "
            f"{total} experts on this rank), but vLLM 0.32's CPUUnquantizedExperts.apply ignores expert_map and "
            f"passes the router's global topk_ids to _C::cpu_fused_moe, whose experts axis holds only this "
            f"rank's {local}: ids >= {local} read outside the weights; contract {contract} remaps "
            f"them (LAYOUTC_VLLM=replace)")


def expert_map(lay: Any, plan: Any, rank: int, vllm_map: torch.Tensor | None, name: str,
               num_local: int) -> torch.Tensor:
    """The contract's int32 [num_experts] map for EP rank `rank`, held to vLLM's.

    lay: the generated module's LAYOUT; plan: its plan at ep_size > 1; vllm_map: the layer's
    `ExpertMapManager.expert_map` (None if vLLM has none); num_local: the layer's w13 dim 0.
    Raises LayoutcVllmError when the local count or the map differ from vLLM's.
    Source: vllm 0.32 fused_moe/expert_map_manager.py determine_expert_map.
    """
    local, ours = lay.local_experts(rank, plan)
    if ours is None or local != num_local:
        raise LayoutcVllmError(f"layoutc: layer {name}: EP rank {rank} holds {num_local} experts, but contract "
                               f"{lay.contract} places {local} on it (ep_size {plan.ep_size}, "
                               f"{plan.expert_placement})")
    if vllm_map is not None and not torch.equal(vllm_map.to(torch.int32).cpu(), ours):
        raise LayoutcVllmError(f"layoutc: layer {name}: vLLM's expert_map {vllm_map.tolist()} on EP rank {rank} "
                               f"differs from contract {lay.contract}'s {ours.tolist()}")
    return ours


def fill_of(lay: Any, entry: Any, plan: Any, dtype: torch.dtype) -> float:
    """The value the contract's `fill` clause writes at `entry`'s pad positions, read from the generated
    module itself: `entry.pad` of two logical tensors of different constants agrees exactly at the pad
    positions (live ones copy the input), under `plan` or, where `plan` pads nothing, under `plan` with
    one intermediate row per rank (padded wherever the contract pads). Raises LayoutcVllmError when the
    tensor has no pad position under either (the contract's fill cannot be read). dtype: the tensor's."""
    probes = [plan]
    with contextlib.suppress(LayoutContractError, ValueError):
        probes.append(lay.replan(plan, intermediate_size=int(plan.tp_size)))
    for probe in probes:
        logical = tuple(entry.shapes(probe)[0])
        one, two = (entry.pad(torch.full(logical, v, dtype=dtype), probe) for v in (1, 2))
        same = one == two
        if bool(same.any()):
            return float(one[same].flatten()[0])
    raise LayoutcVllmError(f"layoutc: contract {lay.contract}'s {entry.name} has no pad position to read its "
                           f"fill from; the spare expert slot of a short EP rank cannot be filled as it says")


def with_spare_slots(lay: Any, entry: Any, plan: Any, t: torch.Tensor) -> torch.Tensor:
    """`t` ([held experts, ...], a short EP rank's logical tensor) with the contract's spare slots after
    it: its experts axis is `local_num_experts` (cdiv(E, ep_size)), and a slot past the rank's experts is
    fill and never routed to (contracts/vllm_cpu_grouped_gemm.moe), so every position of it holds the
    tensor's `fill` (`fill_of`). Returns `t` itself on a rank that fills every slot."""
    slots = int(entry.shapes(plan)[0][0])
    held = int(t.shape[0])
    if held >= slots:
        return t
    out = t.new_empty((slots, *t.shape[1:]))
    out[:held] = t
    out[held:] = fill_of(lay, entry, plan, t.dtype)
    return out


def install(cpu_moe: Any) -> None:
    """Wrap `CPUUnquantizedExperts.apply` (replace mode): on layers planned under EP, the kernel
    computes only the rank's routed, local pairs (`local_pairs`), written into vLLM's `output`.

    A layer without the map (no EP) runs vLLM's apply unchanged. Idempotent.
    """
    cls = cpu_moe.CPUUnquantizedExperts
    original = cls.__dict__.get("apply")
    if original is None:
        raise LayoutcVllmError("layoutc: this vLLM has no CPUUnquantizedExperts.apply to hook; the plugin is "
                               "written against vllm 0.32")
    if getattr(original, _MARK, False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def apply(self: Any, *args: Any, **kwargs: Any) -> Any:
        mapping = getattr(self, MAP_ATTR, None)
        if mapping is None:
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        args_ = bound.arguments
        ids = args_["topk_ids"]
        try:
            pairs = local_pairs("layoutc vllm plugin", args_["topk_weights"], ids, mapping,
                                input_weighted=bool(args_["apply_router_weight_on_input"]))
        except LayoutContractError as exc:
            raise LayoutcVllmError(f"layoutc: {exc}") from None
        args_["topk_weights"], args_["topk_ids"] = pairs.weights, pairs.ids.to(ids.dtype)
        if pairs.rows is None:  # every pair local: the router's rows, local ids
            return original(*bound.args, **bound.kwargs)
        # vLLM's prepare() already scaled hidden_states under apply_router_weight_on_input (top_k 1)
        output = args_["output"]
        if not int(pairs.rows.shape[0]):  # no pair on this rank: it adds exactly 0, no kernel call
            output.zero_()
            return None
        x, weights, local = pairs.gather(args_["hidden_states"]), pairs.weights, pairs.ids
        if getattr(self, "_use_zentorch", False):  # zentorch refuses rows that reach one expert
            x, weights, local = pairs.with_spare(x, int(args_["w1"].shape[0]))
        args_["hidden_states"], args_["topk_weights"], args_["topk_ids"] = x, weights, local.to(ids.dtype)
        args_["output"] = output.new_empty((int(x.shape[0]), *output.shape[1:]))
        original(*bound.args, **bound.kwargs)
        pairs.scatter(args_["output"], out=output)
        return None

    setattr(apply, _MARK, True)
    cls.apply = apply


def uninstall(cpu_moe: Any) -> None:
    """Put vLLM's apply back (tests)."""
    cls = cpu_moe.CPUUnquantizedExperts
    fn = cls.__dict__.get("apply")
    if fn is not None and getattr(fn, _MARK, False):
        cls.apply = fn.__wrapped__


__all__ = ["MAP_ATTR", "expert_map", "fill_of", "install", "refusal", "uninstall", "with_spare_slots"]
