"""Checks of the router outputs and hidden states every MoE forward receives.

The kernels do no bounds check on expert ids (measured on vLLM's cpu_fused_moe:
id == num_experts segfaults, id == -1 corrupts the heap), so ids are checked
here against the number of experts the weight tensors really hold.
"""

from __future__ import annotations

import torch

from .errors import LayoutContractError
from .layout import check_tensor

_ID_DTYPES = frozenset({torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64})


def check_routing(who: str, tokens: int, topk_weights: object, topk_ids: object,
                  num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate router outputs; returns (float32 weights, int32 ids), both contiguous.

    topk_weights: [tokens, top_k] floating; topk_ids: [tokens, top_k] integer in
    [0, num_experts), where num_experts is the experts axis of the weights.
    Raises LayoutContractError on a wrong shape, dtype, device, layout, top_k < 1
    or an id out of range.
    """
    for name, t in (("topk_weights", topk_weights), ("topk_ids", topk_ids)):
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.dim() != 2 \
                or t.shape[0] != tokens or not t.is_cpu:
            raise LayoutContractError(f"{who}: {name} must be a dense CPU tensor [num_tokens={tokens}, top_k]")
    assert isinstance(topk_weights, torch.Tensor) and isinstance(topk_ids, torch.Tensor)
    if topk_ids.shape != topk_weights.shape:
        raise LayoutContractError(f"{who}: topk_ids {tuple(topk_ids.shape)} and topk_weights "
                                  f"{tuple(topk_weights.shape)} must have the same shape")
    if not topk_weights.is_floating_point():
        raise LayoutContractError(f"{who}: topk_weights must be floating point, got {topk_weights.dtype}")
    if topk_ids.dtype not in _ID_DTYPES:
        raise LayoutContractError(f"{who}: topk_ids must be integer (int8..int64, uint8), got {topk_ids.dtype}")
    if topk_ids.shape[1] < 1:
        raise LayoutContractError(f"{who}: top_k must be at least 1, got topk_ids of shape {tuple(topk_ids.shape)}")
    if topk_ids.numel():
        low, high = (int(v) for v in torch.aminmax(topk_ids))
        if low < 0 or high >= num_experts:
            raise LayoutContractError(f"{who}: topk_ids must lie in [0, {num_experts}) (the weights' experts "
                                      f"axis), got [{low}, {high}]")
    weights = topk_weights if topk_weights.dtype == torch.float32 and topk_weights.is_contiguous() \
        else topk_weights.to(torch.float32).contiguous()
    ids = topk_ids if topk_ids.dtype == torch.int32 and topk_ids.is_contiguous() \
        else topk_ids.to(torch.int32).contiguous()
    return weights, ids


def check_hidden(who: str, hidden_states: object, hidden_size: int, dtype: torch.dtype) -> int:
    """hidden_states must be a contiguous CPU [num_tokens, hidden_size] tensor of `dtype`; returns num_tokens."""
    if not isinstance(hidden_states, torch.Tensor) or hidden_states.layout != torch.strided \
            or hidden_states.dim() != 2:
        raise LayoutContractError(f"{who}: hidden_states must be a dense 2-D tensor [num_tokens, {hidden_size}]")
    tokens = int(hidden_states.shape[0])
    check_tensor(who, "hidden_states", hidden_states, (tokens, hidden_size), dtype)
    return tokens
