"""torch's own grouped GEMM, `aten::_grouped_mm`, over tokens sorted by expert.

Source: torch 2.13 `torch._grouped_mm` (aten/src/ATen/native/GroupedMM*): strides
must be multiples of 16 bytes, offsets are int32 cumulative row counts. The
activation runs in Python (activations.gated).
"""

from __future__ import annotations

import torch

from ..activations import gated
from ..errors import LayoutContractError
from ..interface import GATED_HALVES, SWIGLUOAI_PAIRS, WEIGHTS, GlueInterface
from ..ops import op
from ..packed import KernelConfig, PackedWeight, check_forward

INTERFACE = GlueInterface(
    kind="torch_grouped_mm",
    summary="torch._grouped_mm",
    package="torch==2.13.0",
    ops=(("forward", "aten::_grouped_mm"),),
    args=(),
    tensors=WEIGHTS,
    activations=(*GATED_HALVES, SWIGLUOAI_PAIRS),
    dtypes=("bfloat16", "float16", "float32"),
    pads_hidden=False,
    output_bias="once",
    source="torch 2.13.0 torch._grouped_mm",
    foreign_pairs="dropped",  # under EP the generated fused_moe hands it local pairs only (expert_map.run_local)
)
# Names a generated module re-exports from this glue.
PUBLIC = ("load_kernel",)
FORWARD_OP = "aten::_grouped_mm"



def check_strides(cfg: KernelConfig) -> None:
    """`_grouped_mm` needs every non-contiguous stride to be a multiple of 16 bytes
    (torch/_meta_registrations.py check_valid_strides): hidden_size (x, w13^T) and the
    padded intermediate (w2^T, the activation). Raises LayoutContractError instead of
    the op's raw RuntimeError."""
    size = torch.empty((), dtype=cfg.dtype).element_size()
    for what, n in (("hidden_size", cfg.hidden_size), ("the padded intermediate", cfg.intermediate_padded)):
        if n * size % 16:
            raise LayoutContractError(f"{cfg.contract}: {what} is {n} ({n * size} bytes of {cfg.dtype}); "
                                      f"{FORWARD_OP} needs strides that are multiples of 16 bytes")


def load_kernel(who: str) -> None:
    """Nothing to load: the op is built into torch (kept for a uniform glue API)."""
    del who


def prepack_padded(cfg: KernelConfig, padded_w13: torch.Tensor, padded_w2: torch.Tensor,
                   out: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[PackedWeight, PackedWeight]:
    """The op reads the padded [E, N, K] weights as they are (transposed views at call time);
    with `out` (same shapes and dtype), copies of them in those tensors."""
    check_strides(cfg)
    if out is not None:
        padded_w13, padded_w2 = out[0].copy_(padded_w13), out[1].copy_(padded_w2)
    return PackedWeight("w13", cfg, padded_w13), PackedWeight("w2", cfg, padded_w2)


def fused_moe(cfg: KernelConfig, hidden_states: torch.Tensor, packed_w13: PackedWeight, packed_w2: PackedWeight,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """MoE forward with two real `_grouped_mm` calls.

    hidden_states: [num_tokens, hidden_size] of cfg.dtype, contiguous CPU;
    topk_weights / topk_ids: [num_tokens, top_k], ids in [0, cfg.num_experts).
    Returns a new [num_tokens, hidden_size] tensor of cfg.dtype.
    Raises LayoutContractError on wrong input.
    """
    check_strides(cfg)
    f = check_forward(INTERFACE, cfg, hidden_states, packed_w13, packed_w2, topk_weights, topk_ids, dense=True)
    tokens, w13, w2, weights, ids = f.tokens, f.w13, f.w2, f.weights, f.ids
    if tokens == 0:
        return torch.empty(0, cfg.hidden_size, dtype=cfg.dtype)
    top_k = ids.shape[1]
    flat = ids.reshape(-1).to(torch.int64)
    order = torch.argsort(flat, stable=True)
    rows = order // top_k
    offs = torch.cumsum(torch.bincount(flat, minlength=cfg.experts_axis), 0).to(torch.int32)
    grouped_mm = op(FORWARD_OP)
    x = hidden_states.index_select(0, rows).contiguous()
    h = grouped_mm(x, w13.transpose(1, 2), offs=offs)
    act = gated(h, cfg.activation, cfg.w13_view)
    y = grouped_mm(act, w2.transpose(1, 2), offs=offs)
    y = y.float() * weights.reshape(-1).index_select(0, order).unsqueeze(1)
    out = torch.zeros(tokens, cfg.hidden_size, dtype=torch.float32)
    out.index_add_(0, rows, y)
    return out.to(cfg.dtype)
