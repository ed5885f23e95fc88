"""One rank of a GPTQ / AWQ int4 layer through the torch_int4pack_gptq_moe contract's
generated loaders, packed with torch's own convert op and run on its int4pack matmul.

Every size, the rank's slice and every pad come from the generated module (its `plan()`
and the `alloc` / `load` of each tensor role: `weight`, `scale` and `zero` of w13 and w2),
which the verifier holds to the contract (block shard in whole groups; a short rank's
tail holds code 8 with scale 0 and zero 0, which decodes to exactly 0: inertness).
The kernel calls are the glue's (layoutc/runtime/glue/int4pack.py: `pack_codes`,
`fused_moe`; act-order runs gate and up as two calls, each on its own input order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from layoutc.runtime import algebra
from layoutc.runtime.glue import int4pack
from layoutc.runtime.glue._loop import expert_loop
from layoutc.runtime.ops import op
from layoutc.runtime.packed import KernelConfig, PackedWeight
from layoutc.tools.quant_run.codes import ExpertCodes, PackedCodes


@dataclass(frozen=True)
class RankTensors:
    """A rank's padded contract tensors: by (kind, projection), e.g. ("weight", "w13")."""

    tensors: dict[tuple[str, str], torch.Tensor]
    in_perms: tuple[tuple[torch.Tensor | None, torch.Tensor | None], ...]  # per expert: (gate, up)


def load_rank(layout: Any, plan: Any, rank: int, experts: Sequence[ExpertCodes], dtype: torch.dtype) -> RankTensors:
    """Rank `rank`'s padded tensors, each checkpoint projection loaded into its slice by the
    generated `load` (role gate / up / down). Shapes: the contract's padded shapes at `plan`.
    `experts` is read once, in order, one expert at a time (a `codes.LayerCodes` reads each from
    the checkpoint when asked), so only the rank's tensors and one expert's codes are held; codes
    that are `PackedCodes` are read and unpacked only in the region the generated `load` indexes,
    the rank's slice (issue 44 item 2)."""
    kinds = [(kind, proj) for kind in ("weight", "scale", "zero") for proj in ("w13", "w2")]
    entries = {key: layout.tensor(*key) for key in kinds}
    out: dict[tuple[str, str], torch.Tensor] = {key: entries[key].alloc(plan, rank) for key in kinds}
    perms = []
    for e in range(len(experts)):
        ex = experts[e]
        for kind, proj in kinds:
            store = torch.int32 if kind == "weight" else dtype
            parts = (("gate", ex.gate), ("up", ex.up)) if proj == "w13" else (("down", ex.down),)
            for role, p in parts:
                src = {"weight": p.codes, "scale": p.scale, "zero": p.zero}[kind]
                src = src if isinstance(src, PackedCodes) else src.to(store)  # codes: only the rank's region is read
                entries[(kind, proj)].load(out[(kind, proj)], src, plan, rank, expert=e, role=role)
        perms.append((ex.gate.in_perm, ex.up.in_perm))
        del ex
    return RankTensors(out, tuple(perms))


def kernel_config(mod: Any, plan: Any, dtype: torch.dtype) -> KernelConfig:
    """The glue's KernelConfig of a torch_int4pack_gptq_moe plan (padded w13 [E, 2P, H], w2 [E, H, P])."""
    e, h, p = plan.num_experts, plan.hidden_size, plan.intermediate_size_per_partition_padded
    return KernelConfig(mod.CONTRACT, e, h, p, dtype, plan.activation, algebra.Word.HALVES,
                        (("w13", (e, 2 * p, h)), ("w2", (e, h, p))),
                        (("group_size", plan.group_size), ("inner_k_tiles", 2)))


def pack_rank(cfg: KernelConfig, t: RankTensors) -> tuple[PackedWeight, PackedWeight]:
    """Both projections packed by the glue (`aten::_convert_weight_to_int4pack_for_cpu`)."""
    return (int4pack.pack_codes(cfg, "w13", t.tensors[("weight", "w13")], t.tensors[("scale", "w13")],
                                t.tensors[("zero", "w13")]),
            int4pack.pack_codes(cfg, "w2", t.tensors[("weight", "w2")], t.tensors[("scale", "w2")],
                                t.tensors[("zero", "w2")]))


def pack_halves(cfg: KernelConfig, t: RankTensors) -> tuple[PackedWeight, PackedWeight]:
    """Act-order: gate's and up's rows of w13 packed on their own ([E, P, H] each)."""
    p = cfg.intermediate_padded
    half = KernelConfig(cfg.contract, cfg.num_experts, cfg.hidden_size, p, cfg.dtype, cfg.activation, cfg.w13_view,
                        (("w13", (cfg.experts_axis, p, cfg.hidden_size)), ("w2", cfg.shape("w2") or ())), cfg.args)
    rows = [slice(0, p), slice(p, 2 * p)]
    w, s, z = (t.tensors[(kind, "w13")] for kind in ("weight", "scale", "zero"))
    gate, up = (int4pack.pack_codes(half, "w13", w[:, r].contiguous(), s[:, r].contiguous(), z[:, r].contiguous())
                for r in rows)
    return gate, up


def forward(cfg: KernelConfig, t: RankTensors, x: torch.Tensor, weights: torch.Tensor,
            ids: torch.Tensor) -> torch.Tensor:
    """This rank's MoE output [T, H] in cfg.dtype (before the all-reduce).

    x: [T, H] in cfg.dtype; weights float32 / ids int32 [T, top_k]. Without act-order this is
    the glue's `fused_moe`; with it, gate and up are two int4pack calls on x gathered in each
    one's channel order. Raises the glue's LayoutContractError on wrong input.
    """
    w13, w2 = pack_rank(cfg, t)
    if all(g is None and u is None for g, u in t.in_perms):
        return int4pack.fused_moe(cfg, x, w13, w2, weights, ids)
    gate, up = pack_halves(cfg, t)
    mm, g = op(int4pack.FORWARD_OP), cfg.arg("group_size")

    def project(e: int, which: str, h: torch.Tensor) -> torch.Tensor:
        if which == "w2":
            return mm(h, w2.data.packed[e], g, w2.data.scales_and_zeros[e])  # type: ignore[no-any-return]
        pg, pu = t.in_perms[e]
        xg = h if pg is None else h.index_select(1, pg).contiguous()
        xu = h if pu is None else h.index_select(1, pu).contiguous()
        return torch.cat([mm(xg, gate.data.packed[e], g, gate.data.scales_and_zeros[e]),
                          mm(xu, up.data.packed[e], g, up.data.scales_and_zeros[e])], dim=1)

    return expert_loop(cfg, x, weights.to(torch.float32), ids.to(torch.int64), project)


@dataclass(frozen=True)
class Int4Ranks:
    """The int4pack rank strategy (rankloop.RankStrategy): a rank's padded codes, scales and zeros through
    the generated loaders (`load_rank`), packed and run by the glue (`forward`: packing is timed with the call)."""

    layout: Any
    plan: Any
    experts: Sequence[ExpertCodes]
    cfg: KernelConfig

    def load(self, rank: int) -> RankTensors:
        return load_rank(self.layout, self.plan, rank, self.experts, self.cfg.dtype)

    def compute(self, weights: RankTensors, x: torch.Tensor, routing: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return forward(self.cfg, weights, x, routing[0], routing[1])
