"""zentorch's fused MoE op `zentorch::zentorch_fused_moe` (no padding, no prepack).

Source: zentorch 2.13.0.1 (`zentorch_fused_moe`), and vLLM 0.32's
fused_moe/experts/cpu_moe.py `is_zentorch_moe_supported` / ZenCPU experts, whose
swigluoai path reorders w13 to interleaved (gate, up) pairs for ZenDNN's
`swiglu_oai_mul`.
"""

from __future__ import annotations

import importlib
import os

import torch

from ..errors import KernelUnavailableError, LayoutContractError
from ..interface import BIASES, GATED_HALVES, SWIGLUOAI_PAIRS, WEIGHTS, GlueInterface
from ..ops import has_op, op
from ..packed import KernelConfig, PackedWeight, check_bias, check_forward

INTERFACE = GlueInterface(
    kind="zentorch_moe",
    summary="zentorch fused MoE (zentorch::zentorch_fused_moe)",
    package="zentorch==2.13.0.1",
    ops=(("forward", "zentorch::zentorch_fused_moe"),),
    args=("activation",),
    tensors=WEIGHTS + BIASES,
    activations=(*GATED_HALVES, SWIGLUOAI_PAIRS),
    dtypes=("bfloat16", "float32"),
    pads_hidden=False,
    output_bias="once",
    forward_options=("apply_router_weight_on_input",),
    router_weight=("output", "input"),
    router_weight_input_top_k=1,
    source="zentorch 2.13.0.1 zentorch_fused_moe; vllm 0.32 fused_moe/experts/cpu_moe.py",
    foreign_pairs="dropped",  # under EP the generated fused_moe hands it local pairs only (expert_map.run_local)
)
# Names a generated module re-exports from this glue.
PUBLIC = ("load_kernel", "bf16_is_reliable")
FORWARD_OP = "zentorch::zentorch_fused_moe"
# Measured on an AVX2-only AMD EPYC: bf16 zentorch_fused_moe returned NaN or values
# off by 0.4-0.8 whenever hidden_size >= 640, unless ZENDNNL_MATMUL_ALGO=3 was set;
# float32 was always right. bf16 is refused there unless the caller opts in.
WORKAROUND_ENV = ("ZENDNNL_MATMUL_ALGO", "3")


def load_kernel(who: str) -> None:
    """Import zentorch, which registers the op. Raises KernelUnavailableError when it is absent."""
    if has_op(FORWARD_OP):
        return
    try:
        importlib.import_module("zentorch")
    except ImportError as exc:
        raise KernelUnavailableError(f"{who}: the kernel needs `pip install {INTERFACE.package}` ({exc})") from exc
    if not has_op(FORWARD_OP):
        raise KernelUnavailableError(f"{who}: {FORWARD_OP} is not registered by the installed zentorch")


def bf16_is_reliable() -> bool:
    """True where bf16 zentorch_fused_moe is trusted: avx512_bf16, or the opt-in workaround env."""
    if bool(torch.cpu._is_avx512_bf16_supported()):
        return True
    return os.environ.get(WORKAROUND_ENV[0]) == WORKAROUND_ENV[1]


def prepack_padded(cfg: KernelConfig, padded_w13: torch.Tensor, padded_w2: torch.Tensor,
                   out: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[PackedWeight, PackedWeight]:
    """zentorch reads the plain [E, ...] layout: wrap the (contiguous, checked) weights as they
    are, or, with `out` (same shapes and dtype), copies of them in those tensors."""
    if out is not None:
        padded_w13, padded_w2 = out[0].copy_(padded_w13), out[1].copy_(padded_w2)
    return PackedWeight("w13", cfg, padded_w13), PackedWeight("w2", cfg, padded_w2)


def fused_moe(cfg: KernelConfig, hidden_states: torch.Tensor, packed_w13: PackedWeight, packed_w2: PackedWeight,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor, *, w13_bias: torch.Tensor | None = None,
              w2_bias: torch.Tensor | None = None, apply_router_weight_on_input: bool = False) -> torch.Tensor:
    """Run `zentorch::zentorch_fused_moe`.

    hidden_states: [num_tokens, hidden_size] of cfg.dtype, contiguous CPU;
    topk_weights / topk_ids: [num_tokens, top_k], ids in [0, cfg.num_experts); at
    least two distinct experts must receive tokens (the op refuses one);
    apply_router_weight_on_input (needs top_k == 1): the weight multiplies the expert's
    input, `out = expert(w * x)` (Llama-4): the hidden states are scaled here in cfg.dtype,
    as vLLM's ZenCPU experts do (fused_moe/experts/cpu_moe.py: `hidden_states.mul(topk_weights)`),
    and the op is told `skip_weighted`, which only drops the output weighting. Returns a new
    [num_tokens, hidden_size] tensor. Raises LayoutContractError on wrong input;
    KernelUnavailableError when zentorch is missing, or for bf16 on a CPU without
    avx512_bf16 unless ZENDNNL_MATMUL_ALGO=3.
    """
    who = cfg.contract
    f = check_forward(INTERFACE, cfg, hidden_states, packed_w13, packed_w2, topk_weights, topk_ids, dense=True)
    tokens, w13, w2, weights, ids = f.tokens, f.w13, f.w2, f.weights, f.ids
    b13 = check_bias(who, "w13_bias", w13_bias, cfg)
    b2 = check_bias(who, "w2_bias", w2_bias, cfg)
    if tokens == 0:
        return torch.empty(0, cfg.hidden_size, dtype=cfg.dtype)
    if int(torch.unique(ids).numel()) < 2:
        raise LayoutContractError(f"{who}: zentorch_fused_moe needs at least 2 experts receiving tokens")
    if not isinstance(apply_router_weight_on_input, bool):
        raise LayoutContractError(f"{who}: apply_router_weight_on_input must be a bool, "
                                  f"got {apply_router_weight_on_input!r}")
    if apply_router_weight_on_input and ids.shape[1] != 1:
        raise LayoutContractError(f"{who}: apply_router_weight_on_input needs top_k == 1")
    if cfg.dtype == torch.bfloat16 and not bf16_is_reliable():
        raise KernelUnavailableError(f"{who}: bf16 zentorch_fused_moe gives wrong results (NaN) on CPUs without "
                                     "avx512_bf16; set ZENDNNL_MATMUL_ALGO=3 to opt in to the workaround, "
                                     "or use float32")
    load_kernel(who)
    x = hidden_states
    if apply_router_weight_on_input:  # skip_weighted alone gives expert(x) (measured, 2.13.0.1)
        x = (hidden_states * weights.to(hidden_states.dtype)).contiguous()
    out = torch.empty_like(hidden_states)
    op(FORWARD_OP)(out, x, w13, w2, b13, b2, weights, ids, bool(apply_router_weight_on_input),
                   cfg.activation)
    return out
