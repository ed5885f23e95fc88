"""How far `layoutc run`'s scaled inputs reach into a layer's gate/up pre-activations, measured one
expert (or a few) at a time (issue 44 item 5: no float32 copy of the layer's gate/up is made).

The scale of the second half of the tokens brings the median |x @ W_gate/up^T| over every
expert to the target: max(REACH, CLAMP_MARGIN * the largest clamp limit config.json states for
the layer, activation.clamp_limits). `ReachMeter` takes the weights one projection or one block
of experts at a time, in whatever dtype they are stored (each block is cast to float32 for its
matmul and dropped), keeps only |pre-activation| values ([T, rows] per projection), and gives
the median of them all: the same median as over the whole layer at once (a median does not
depend on the order its values arrive in).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

#: The least median |gate/up pre-activation| the scaled half of `layoutc run`'s inputs reaches; with
#: no clamp in config.json this is the target (issue 39 item 5: past gpt-oss's 7, hy_v4's 10).
REACH = 16.0
#: Where config.json states a clamp, the scaled half's median reaches CLAMP_MARGIN times its
#: largest limit, so most pre-activations pass it and a clamp that one side computes and the other
#: does not shows as a MISMATCH (a clamp at 100 and a median of 16 would never be reached).
CLAMP_MARGIN = 2.0
#: Most float32 elements of weights one `add_experts` block casts at a time (64 MiB).
BLOCK_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class InputReach:
    """What the scaled half of `run`'s inputs reaches for one layer.

    scale: the factor of the second half (>= 1); median: the median |gate/up pre-activation| over
    every expert it reaches (the target, or more where the 1x inputs already do); target:
    max(REACH, CLAMP_MARGIN * limit); limit / key: the largest clamp limit config.json states for
    the layer (activation.clamp_limits), or None / "" where it states none."""

    scale: float
    median: float
    target: float
    limit: float | None = None
    key: str = ""

    def text(self) -> str:
        """The report's words: the median reached and the limit it was chosen against."""
        if self.limit is None:
            return f"median |gate/up pre-activation| {self.median:.3g}, config.json states no clamp"
        return (
            f"median |gate/up pre-activation| {self.median:.3g}, at least {CLAMP_MARGIN:g} x {self.key} "
            f"{self.limit:g}, the largest clamp config.json states"
        )


class ReachMeter:
    """|x @ W^T| of gate/up projections, collected one projection or block of experts at a time.

    x: [T, H] hidden states (any float dtype; used in float32). `add(name, w)` takes one
    projection's weight [rows, H] (or [..., rows, H]; `transposed`: [..., H, rows]) in its stored
    dtype; a name given twice is counted once (a reference that reads a layer's tensors again). `reach`
    gives the InputReach over everything added. Holds T * rows float32 values per projection, never
    the weights."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x.to(torch.float32)
        self._parts: dict[str, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._parts)

    def add(self, name: str, w: torch.Tensor, transposed: bool = False) -> None:
        """Add projection(s) `w` (float or bfloat16 ...; [..., rows, H], or [..., H, rows] when `transposed`)."""
        if name in self._parts:
            return
        wf = w.to(torch.float32)
        h = self.x @ (wf if transposed else wf.transpose(-1, -2))
        self._parts[name] = h.abs().reshape(-1)

    def add_experts(self, name: str, src: Any, experts: int, transposed: bool = False) -> None:
        """Add a fused source's experts ([E, rows, H], or [E, H, rows] when `transposed`: a tensor or
        a checkpoint slice, read BLOCK_ELEMENTS at a time in its stored dtype)."""
        shape = list(src.shape) if isinstance(src, torch.Tensor) else list(src.get_shape())
        per = max(1, BLOCK_ELEMENTS // max(1, shape[1] * shape[2]))
        for lo in range(0, experts, per):
            hi = min(experts, lo + per)
            self.add(f"{name}[{lo}:{hi}]", src[lo:hi], transposed)

    def reach(self, cfg: Any = None, layer: int = 0) -> InputReach:
        """The InputReach of every value added: the scale that brings their median to
        max(REACH, CLAMP_MARGIN * the largest clamp limit `cfg` (MoEModelConfig.text_config;
        None: no clamp) states for `layer`), at least 1."""
        from layoutc.tools.checkpoints.activation import clamp_limits

        limits = clamp_limits(cfg or {}, layer)
        key = max(limits, key=lambda k: limits[k]) if limits else ""
        limit = limits[key] if limits else None
        target = max(REACH, CLAMP_MARGIN * limit) if limit is not None else REACH
        values = torch.cat(list(self._parts.values())) if self._parts else torch.empty(0)
        med = float(values.median()) if values.numel() else 0.0
        scale = max(1.0, target / med) if med > 0 and med == med else 1.0
        return InputReach(scale, med * scale if med == med else 0.0, target, limit, key)


def layer_reach(ckpt: Any, moe: Any, layer: int, x: torch.Tensor) -> InputReach:
    """The InputReach of `layer`'s gate/up weights, read through the declared format: only gate
    and up (never down), in their stored dtype, one expert (per-expert formats) or one block of
    experts (fused formats, BLOCK_ELEMENTS at a time) at a time. x: [T, H]. Raises the reader's
    FormatError for a missing tensor."""
    fmt = moe.format
    meter = ReachMeter(x)
    if fmt.fused:
        n = fmt.names(layer)
        for role in ("gate_up",) if "gate_up" in n else tuple(r for r in ("gate", "up") if r in n):  # non-gated: up
            meter.add_experts(
                role,
                ckpt.experts_slice(n[role], moe.num_experts, fmt.experts_flattened),
                moe.num_experts,
                bool(fmt.transposed),
            )
    else:
        for e in range(moe.num_experts):
            n = fmt.names(layer, e)
            for role in (r for r in ("gate", "up") if r in n):  # a non-gated format names up alone
                meter.add(f"{role}[{e}]", ckpt.tensor(n[role]), bool(fmt.transposed))
    return meter.reach(moe.text_config, layer)
