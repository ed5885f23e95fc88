"""Load one MoE layer of a checkpoint into one rank's padded parameters, through a
generated module's `alloc_*` / `load_*` (runtime/loading.py).

Each checkpoint tensor is read once per rank, only the rank's slice of it (a
safetensors `get_slice`), straight into the padded parameter; no full layer is
ever stacked. Orientation, gate/up order and fused row layout come from the
declared `CheckpointFormat`, never from shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .formats import FormatError, ModelMoE
from .reader import Checkpoint


@dataclass
class RankWeights:
    """One rank's padded parameters of one layer (torch tensors; biases None when absent)."""

    w13: Any
    w2: Any
    w13_bias: Any = None
    w2_bias: Any = None


def _need(mod: ModuleType, name: str) -> Any:
    fn = getattr(mod, name, None)
    if fn is None:
        raise FormatError("LR120", f"contract module {mod.__name__} has no {name}(); compile it with a "
                          "layoutc that emits loaders")
    return fn


def load_layer_rank(ckpt: Checkpoint, moe: ModelMoE, layer: int, mod: ModuleType, plan: Any,
                    rank: int) -> RankWeights:
    """Rank `rank`'s padded w13, w2 (and biases when the format declares them) of `layer`.

    Raises FormatError (LR112 a missing tensor, LR120 a module without loaders) and the
    module's LayoutContractError on a tensor whose shape the contract does not expect.
    """
    fmt = moe.format
    w13 = _need(mod, "alloc_w13")(plan, rank)
    w2 = _need(mod, "alloc_w2")(plan, rank)
    load13, load2 = _need(mod, "load_w13"), _need(mod, "load_w2")
    out = RankWeights(w13, w2)
    has_bias = fmt.gate_up_bias is not None
    if has_bias:
        out.w13_bias = _need(mod, "alloc_w13_bias")(plan, rank)
        out.w2_bias = _need(mod, "alloc_w2_bias")(plan, rank)
    if fmt.fused:
        n = fmt.names(layer)
        load13(w13, ckpt.slice(n["gate_up"]), plan, rank, role="gate_up", transposed=fmt.transposed,
               source_layout=fmt.gate_up_layout)
        load2(w2, ckpt.slice(n["down"]), plan, rank, role="down", transposed=fmt.down_transposed)
        if has_bias:
            mod.load_w13_bias(out.w13_bias, ckpt.slice(n["gate_up_bias"]), plan, rank, role="gate_up",
                              source_layout=fmt.gate_up_layout)
            mod.load_w2_bias(out.w2_bias, ckpt.slice(n["down_bias"]), plan, rank)
        return out
    for e in range(moe.num_experts):
        n = fmt.names(layer, e)
        load13(w13, ckpt.slice(n["gate"]), plan, rank, expert=e, role="gate", transposed=fmt.transposed)
        load13(w13, ckpt.slice(n["up"]), plan, rank, expert=e, role="up", transposed=fmt.transposed)
        load2(w2, ckpt.slice(n["down"]), plan, rank, expert=e, role="down", transposed=fmt.down_transposed)
        if has_bias:
            raise FormatError("LR121", f"format {fmt.model_type!r}: per-expert biases are not supported yet")
    return out
