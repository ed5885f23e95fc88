# Copied by `layoutc compile` from layoutc/runtime/glue/int8pack.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""torch's int8 weight-only matmul, `aten::_weight_int8pack_mm`, one call per expert and projection.

Source: torch 2.13 aten/src/ATen/native/cpu/int8mm_kernel.cpp: int8 [N, K]
weights, per-output-channel scales [N]. The bf16 kernel loads K in vectors of 16
(AVX-512; 8 on AVX2) with no tail: any other K segfaults or returns garbage, so
every K reaching it is checked first.

Two ways in: `prepack_padded` quantizes float weights (torch_int8pack_moe), `pack_codes`
takes a checkpoint's own GPTQ uint8b128 codes and per-channel scales unchanged
(torch_int8pack_gptq_moe). Both produce the `Int8Weights` that `fused_moe` runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import LayoutContractError
from ..interface import GATED_HALVES, WEIGHTS, GlueInterface
from ..layout import check_tensor
from ..ops import op
from ..packed import KernelConfig, PackedWeight, check_forward, refuse_prepack_out
from ._loop import expert_loop

INTERFACE = GlueInterface(
    kind="torch_int8pack",
    summary="aten::_weight_int8pack_mm",
    package="torch==2.13.0",
    ops=(("forward", "aten::_weight_int8pack_mm"),),
    args=(),
    tensors=WEIGHTS,
    activations=GATED_HALVES,
    dtypes=("bfloat16", "float16", "float32"),
    pads_hidden=False,
    output_bias="once",
    source="torch 2.13.0 aten/src/ATen/native/cpu/int8mm_kernel.cpp",
    foreign_pairs="dropped",  # under EP the generated fused_moe hands it local pairs only (expert_map.run_local)
)
# Names a generated module re-exports from this glue.
PUBLIC = ("load_kernel", "quantize_int8", "Int8Weights")
FORWARD_OP = "aten::_weight_int8pack_mm"
BF16_K_MULTIPLE = 16
#: GPTQ int8 (vLLM's uint8b128): the stored byte q means q - 128.
GPTQ_INT8_BIAS = 128


@dataclass(frozen=True)
class Int8Weights:
    """Per expert: int8 [N, K] weights and their [N] scales."""

    weights: tuple[torch.Tensor, ...]
    scales: tuple[torch.Tensor, ...]


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 of one [N, K] weight: (int8 [N, K], scales [N] in weight.dtype).

    A zero row (a pad row) gets scale 0 and codes 0, so it dequantises exactly to 0.
    """
    scale = weight.float().abs().amax(dim=1) / 127
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(weight.float() / safe.unsqueeze(1)).clamp(-127, 127).to(torch.int8)
    return codes, scale.to(weight.dtype)


def check_k(who: str, what: str, k: int, dtype: torch.dtype) -> None:
    """Refuse a bf16 K that is not a multiple of 16 (the kernel would read past the row and crash)."""
    if dtype == torch.bfloat16 and k % BF16_K_MULTIPLE:
        raise LayoutContractError(f"{who}: {what} has K={k}; bf16 {FORWARD_OP} needs K % {BF16_K_MULTIPLE} == 0 "
                                  "(it would read past the row and crash)")



def pack_codes(cfg: KernelConfig, role: str, codes: torch.Tensor, scales: torch.Tensor) -> PackedWeight:
    """A checkpoint's own GPTQ int8 codes as the kernel's int8 weights (no quantization).

    codes: int32 [E, N, K], the uint8b128 code q in 0..255 (value (q - 128) * scale);
    scales: [E, N, 1] of cfg.dtype (one group along K: the per-output-channel scale).
    Shapes are cfg.shape(role) (the contract's padded shapes). The kernel gets int8
    w = q - 128 (exact: -128..127) and scales [N] per expert, so `_weight_int8pack_mm`
    computes (x @ w.T) * scales = x @ ((q - 128) * s).T, the GPTQ decode. Returns the
    PackedWeight `fused_moe` takes. Raises LayoutContractError on a wrong shape or dtype,
    a code outside 0..255, or a bf16 K that is not a multiple of 16. Sources: vLLM 0.32 auto_gptq.py
    (uint8b128), torch 2.13 int8mm_kernel.cpp (the kernel; docs/kernels.md section 6.3).
    """
    shape = cfg.shape(role)
    assert shape is not None
    e, n, k = shape
    check_k(cfg.contract, role, k, cfg.dtype)
    check_tensor(cfg.contract, f"{role} codes", codes, (e, n, k), torch.int32)
    check_tensor(cfg.contract, f"{role} scales", scales, (e, n, 1), cfg.dtype)
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) > 255):
        raise LayoutContractError(f"{cfg.contract}: {role} codes must be uint8b128 (0..255), got "
                                  f"{int(codes.min())}..{int(codes.max())}")
    weights = tuple((codes[i] - GPTQ_INT8_BIAS).to(torch.int8).contiguous() for i in range(e))
    return PackedWeight(role, cfg, Int8Weights(weights, tuple(scales[i, :, 0].contiguous() for i in range(e))))


def load_kernel(who: str) -> None:
    """Nothing to load: the op is built into torch (kept for a uniform glue API)."""
    del who


def prepack_padded(cfg: KernelConfig, padded_w13: torch.Tensor, padded_w2: torch.Tensor,
                   out: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[PackedWeight, PackedWeight]:
    """Quantize each padded expert to int8 per output channel (K checked for bf16).
    `out` is refused (LayoutContractError): the packed form is per-expert
    codes and tables, not a tensor of the padded shape.
    """
    refuse_prepack_out(cfg, out)
    result = []
    for role, padded in (("w13", padded_w13), ("w2", padded_w2)):
        check_k(cfg.contract, role, int(padded.shape[2]), cfg.dtype)
        pairs = [quantize_int8(expert) for expert in padded]
        result.append(PackedWeight(role, cfg, Int8Weights(tuple(c for c, _ in pairs), tuple(s for _, s in pairs))))
    return result[0], result[1]


def fused_moe(cfg: KernelConfig, hidden_states: torch.Tensor, packed_w13: PackedWeight, packed_w2: PackedWeight,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """MoE forward with `_weight_int8pack_mm`, one call per expert and projection.

    hidden_states: [num_tokens, hidden_size] of cfg.dtype; topk_* [num_tokens, top_k].
    Returns a new [num_tokens, hidden_size] tensor. Raises LayoutContractError on wrong input.
    """
    who = cfg.contract
    f = check_forward(INTERFACE, cfg, hidden_states, packed_w13, packed_w2, topk_weights, topk_ids)
    tokens, weights, ids = f.tokens, f.weights, f.ids
    data = {"w13": f.w13, "w2": f.w2}
    for role, packed in data.items():
        shape = cfg.shape(role)
        assert shape is not None
        n, k = shape[1:]
        check_k(who, f"packed_{role}", k, cfg.dtype)
        if not isinstance(packed, Int8Weights) or len(packed.weights) != cfg.experts_axis:
            raise LayoutContractError(f"{who}: packed_{role} must come from prepack() for this plan")
        for weight, scale in zip(packed.weights, packed.scales, strict=True):
            check_tensor(who, f"packed_{role} (int8 weight)", weight, (n, k), torch.int8)
            check_tensor(who, f"packed_{role} (scales)", scale, (n,), cfg.dtype)
    if tokens == 0:
        return torch.empty(0, cfg.hidden_size, dtype=cfg.dtype)
    forward = op(FORWARD_OP)

    def project(e: int, which: str, x: torch.Tensor) -> torch.Tensor:
        packed = data[which]
        check_k(who, which, int(x.shape[1]), x.dtype)
        result: torch.Tensor = forward(x, packed.weights[e], packed.scales[e])
        return result

    return expert_loop(cfg, hidden_states, weights, ids, project)
