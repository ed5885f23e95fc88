"""One rank of a GPTQ int8 (uint8b128, symmetric, channelwise) layer through the
torch_int8pack_gptq_moe contract's generated loaders, run on torch's `_weight_int8pack_mm`.

Every size, the rank's slice and every pad come from the generated module (its `plan()`
and the `alloc` / `load` of the `weight` and `scale` roles of w13 and w2), which the
verifier holds to the contract (rows split anywhere: per-channel scales; pad and tail rows
hold code 128 with scale 0, w2's pad columns code 128: all decode to exactly 0). The
codes are the checkpoint's own (quant_run/codes.py unpacks them; no requantization); the
kernel calls are the glue's (layoutc/runtime/glue/int8pack.py: `pack_codes`, `fused_moe`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from layoutc.runtime import algebra
from layoutc.runtime.glue import int8pack
from layoutc.runtime.packed import KernelConfig
from layoutc.tools.quant_run.codes import ExpertCodes, PackedCodes
from layoutc.tools.runplan import RunError

#: The methods whose codes run on the int8pack kernel (8-bit, implicit zero 128).
INT8PACK_SCHEMES = ("gptq_int8", "ct_wna16_int8")


def load_rank(layout: Any, plan: Any, rank: int, experts: Sequence[ExpertCodes]) -> dict[tuple[str, str], torch.Tensor]:
    """Rank `rank`'s padded tensors by (kind, projection): ("weight", p) int32 codes, ("scale", p)
    scales in the plan's dtype, each checkpoint projection (codes [out, in] 0..255, scales [out, 1])
    loaded into its slice by the generated `load` (role gate / up / down). Shapes: the
    contract's padded shapes at `plan`. RunError LR162 for an act-order input permutation
    (none exists with one group along K: the contract has no g_idx)."""
    kinds = [(kind, proj) for kind in ("weight", "scale") for proj in ("w13", "w2")]
    entries = {key: layout.tensor(*key) for key in kinds}
    assert all(e is not None for e in entries.values()), layout.contract
    out: dict[tuple[str, str], torch.Tensor] = {key: entries[key].alloc(plan, rank) for key in kinds}
    for e in range(len(experts)):  # one expert's codes at a time (a codes.LayerCodes reads each when asked)
        ex = experts[e]
        if ex.gate.in_perm is not None or ex.up.in_perm is not None or ex.down.in_perm is not None:
            raise RunError("LR162", f"contract {layout.contract} reads K in the stored order: an act-order "
                           "permutation of its input channels cannot be held")
        for kind, proj in kinds:
            dst = out[(kind, proj)]
            parts = (("gate", ex.gate), ("up", ex.up)) if proj == "w13" else (("down", ex.down),)
            for role, p in parts:
                src = p.codes if kind == "weight" else p.scale
                src = src if isinstance(src, PackedCodes) else src.to(dst.dtype)  # codes: the rank's region is read
                entries[(kind, proj)].load(dst, src, plan, rank, expert=e, role=role)
        del ex
    return out


def kernel_config(mod: Any, plan: Any, dtype: torch.dtype) -> KernelConfig:
    """The glue's KernelConfig of a torch_int8pack_gptq_moe plan (padded w13 [E, 2P, H], w2 [E, H, P])."""
    e, h, p = plan.num_experts, plan.hidden_size, plan.intermediate_size_per_partition_padded
    return KernelConfig(mod.CONTRACT, e, h, p, dtype, plan.activation, algebra.Word.HALVES,
                        (("w13", (e, 2 * p, h)), ("w2", (e, h, p))))


def forward(cfg: KernelConfig, t: dict[tuple[str, str], torch.Tensor], x: torch.Tensor, weights: torch.Tensor,
            ids: torch.Tensor) -> torch.Tensor:
    """This rank's MoE output [T, H] in cfg.dtype (before the all-reduce): the glue's `pack_codes`
    (int8 w = q - 128, scales [N]) and `fused_moe` (one `_weight_int8pack_mm` per expert and
    projection). x: [T, H] in cfg.dtype; weights float32 / ids int32 [T, top_k]. Raises the
    glue's LayoutContractError on wrong input."""
    w13 = int8pack.pack_codes(cfg, "w13", t[("weight", "w13")], t[("scale", "w13")])
    w2 = int8pack.pack_codes(cfg, "w2", t[("weight", "w2")], t[("scale", "w2")])
    return int8pack.fused_moe(cfg, x, w13, w2, weights, ids)


@dataclass(frozen=True)
class Int8Ranks:
    """The int8pack rank strategy (rankloop.RankStrategy): a rank's padded codes and scales through the
    generated loaders (`load_rank`), packed and run by the glue (`forward`: packing is timed with the call)."""

    layout: Any
    plan: Any
    experts: Sequence[ExpertCodes]
    cfg: KernelConfig

    def load(self, rank: int) -> dict[tuple[str, str], torch.Tensor]:
        return load_rank(self.layout, self.plan, rank, self.experts)

    def compute(self, weights: dict[tuple[str, str], torch.Tensor], x: torch.Tensor,
                routing: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return forward(self.cfg, weights, x, routing[0], routing[1])
