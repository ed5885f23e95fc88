"""torch's int4 weight-only matmul on CPU, one call per expert and projection.

Source: torch 2.13 `aten::_convert_weight_to_int4pack_for_cpu` and
`aten::_weight_int4pack_mm_for_cpu` (aten/src/ATen/native/cpu/int4mm_kernel.cpp):
uint8 [N, K / 2] packed codes, a [K / group_size, N, 2] (scale, zero) table,
dequantisation (q - 8) * scale + zero. Weights are quantized after padding.
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
    kind="torch_int4pack",
    summary="aten::_convert_weight_to_int4pack_for_cpu + _weight_int4pack_mm_for_cpu",
    package="torch==2.13.0",
    ops=(("convert", "aten::_convert_weight_to_int4pack_for_cpu"), ("forward", "aten::_weight_int4pack_mm_for_cpu")),
    args=("group_size", "inner_k_tiles"),
    tensors=WEIGHTS,
    activations=GATED_HALVES,
    dtypes=("bfloat16", "float16", "float32"),
    pads_hidden=False,
    output_bias="once",
    source="torch 2.13.0 aten/src/ATen/native/cpu/int4mm_kernel.cpp",
    foreign_pairs="dropped",  # under EP the generated fused_moe hands it local pairs only (expert_map.run_local)
)
# Names a generated module re-exports from this glue.
PUBLIC = ("load_kernel", "quantize_int4", "Int4Weights")
CONVERT_OP = "aten::_convert_weight_to_int4pack_for_cpu"
FORWARD_OP = "aten::_weight_int4pack_mm_for_cpu"


@dataclass(frozen=True)
class Int4Weights:
    """Per expert: the packed uint8 [N, K / 2] weight and its [K / group_size, N, 2] table."""

    packed: tuple[torch.Tensor, ...]
    scales_and_zeros: tuple[torch.Tensor, ...]


def quantize_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric int4 codes in 0..15 of one [N, K] weight, in groups of `group_size` along K.

    Returns (codes int32 [N, K], scales_and_zeros [K / group_size, N, 2] in weight.dtype)
    for the kernel's (q - 8) * scale + zero. A constant group (an all-zero pad group)
    gets scale 0 and zero = its value, so it dequantises exactly.
    """
    n, k = weight.shape
    grouped = weight.float().reshape(n, k // group_size, group_size)
    low, high = grouped.amin(dim=2), grouped.amax(dim=2)
    scale = (high - low) / 15
    zero = low + 8 * scale
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.where(scale.unsqueeze(2) > 0, torch.round((grouped - zero.unsqueeze(2)) / safe.unsqueeze(2) + 8),
                        torch.full_like(grouped, 8.0)).clamp(0, 15)
    table = torch.stack([scale, torch.where(scale > 0, zero, low)], dim=2).transpose(0, 1).contiguous()
    return codes.reshape(n, k).to(torch.int32), table.to(weight.dtype)



GROUP_SIZES = (32, 64, 128, 256)


def check_shapes(cfg: KernelConfig) -> int:
    """The checks of torch 2.13's `_convert_weight_to_int4pack_cpu` / `_weight_int4pack_mm_cpu`
    (LinearAlgebra.cpp: qGroupSize in {32, 64, 128, 256}, K % qGroupSize == 0, K even,
    N % 16 == 0) on both padded weights, before any op runs; returns group_size.
    Raises LayoutContractError naming the size, instead of the op's raw RuntimeError."""
    group_size = cfg.arg("group_size")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size not in GROUP_SIZES:
        raise LayoutContractError(f"{cfg.contract}: {FORWARD_OP} takes group_size in {GROUP_SIZES}, "
                                  f"got {group_size!r}")
    for role in ("w13", "w2"):
        shape = cfg.shape(role)
        assert shape is not None
        n, k = shape[1:]
        if k % group_size or k % 2 or n % 16:
            raise LayoutContractError(f"{cfg.contract}: padded {role} is [N={n}, K={k}] per expert; {FORWARD_OP} "
                                      f"needs K % group_size ({group_size}) == 0, K even and N % 16 == 0")
    return group_size


def load_kernel(who: str) -> None:
    """Nothing to load: the op is built into torch (kept for a uniform glue API)."""
    del who


def prepack_padded(cfg: KernelConfig, padded_w13: torch.Tensor, padded_w2: torch.Tensor,
                   out: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[PackedWeight, PackedWeight]:
    """Quantize each padded expert to int4 per group and pack it with the real convert op.

    The padded intermediate is a whole number of quant groups (the contract proves
    it), so w2's pad columns form all-zero groups or share one with live columns
    and meet only the exactly-zero pad lanes of w13.
    `out` is refused (LayoutContractError): the packed form is per-expert
    codes and tables, not a tensor of the padded shape.
    """
    refuse_prepack_out(cfg, out)
    group_size, tiles = check_shapes(cfg), int(cfg.arg("inner_k_tiles"))
    result = []
    for role, padded in (("w13", padded_w13), ("w2", padded_w2)):
        packed, tables = [], []
        for expert in padded:
            codes, table = quantize_int4(expert, group_size)
            packed.append(op(CONVERT_OP)(codes.contiguous(), tiles))
            tables.append(table)
        result.append(PackedWeight(role, cfg, Int4Weights(tuple(packed), tuple(tables))))
    return result[0], result[1]


def pack_codes(cfg: KernelConfig, role: str, codes: torch.Tensor, scales: torch.Tensor,
               zeros: torch.Tensor) -> PackedWeight:
    """Pack a checkpoint's own int4 codes (no quantization) with the real convert op.

    codes: int32 [E, N, K] in 0..15; scales / zeros: [E, N, K / group_size] of cfg.dtype,
    the kernel's (q - 8) * scale + zero per group (GPTQ / AWQ (q - z) * s is zero = (8 - z) * s).
    Shapes are cfg.shape(role) (the contract's padded shapes). Returns the PackedWeight
    `fused_moe` takes. Raises LayoutContractError on a wrong shape, dtype or code range.
    """
    group_size, tiles = check_shapes(cfg), int(cfg.arg("inner_k_tiles"))
    shape = cfg.shape(role)
    assert shape is not None
    e, n, k = shape
    check_tensor(cfg.contract, f"{role} codes", codes, (e, n, k), torch.int32)
    for what, t in (("scales", scales), ("zeros", zeros)):
        check_tensor(cfg.contract, f"{role} {what}", t, (e, n, k // group_size), cfg.dtype)
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) > 15):
        raise LayoutContractError(f"{cfg.contract}: {role} codes must be int4 (0..15), got "
                                  f"{int(codes.min())}..{int(codes.max())}")
    convert = op(CONVERT_OP)
    packed = tuple(convert(codes[i].contiguous(), tiles) for i in range(e))
    tables = tuple(torch.stack([scales[i], zeros[i]], dim=2).transpose(0, 1).contiguous() for i in range(e))
    return PackedWeight(role, cfg, Int4Weights(packed, tables))


def fused_moe(cfg: KernelConfig, hidden_states: torch.Tensor, packed_w13: PackedWeight, packed_w2: PackedWeight,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """MoE forward with `_weight_int4pack_mm_for_cpu`, one call per expert and projection.

    hidden_states: [num_tokens, hidden_size] of cfg.dtype; topk_* [num_tokens, top_k].
    Returns a new [num_tokens, hidden_size] tensor. Raises LayoutContractError on wrong input.
    """
    who = cfg.contract
    f = check_forward(INTERFACE, cfg, hidden_states, packed_w13, packed_w2, topk_weights, topk_ids)
    tokens, weights, ids = f.tokens, f.weights, f.ids
    data = {"w13": f.w13, "w2": f.w2}
    group_size = check_shapes(cfg)
    for role, packed in data.items():
        shape = cfg.shape(role)
        assert shape is not None
        n, k = shape[1:]
        if not isinstance(packed, Int4Weights) or len(packed.packed) != cfg.experts_axis:
            raise LayoutContractError(f"{who}: packed_{role} must come from prepack() for this plan")
        for table, weight in zip(packed.scales_and_zeros, packed.packed, strict=True):
            check_tensor(who, f"packed_{role} (scales and zeros)", table, (k // group_size, n, 2), cfg.dtype)
            check_tensor(who, f"packed_{role} (packed weight)", weight, (n, k // 2), torch.uint8)
    if tokens == 0:
        return torch.empty(0, cfg.hidden_size, dtype=cfg.dtype)

    def project(e: int, which: str, x: torch.Tensor) -> torch.Tensor:
        packed = data[which]
        result: torch.Tensor = op(FORWARD_OP)(x, packed.packed[e], group_size, packed.scales_and_zeros[e])
        return result

    return expert_loop(cfg, hidden_states, weights, ids, project)
