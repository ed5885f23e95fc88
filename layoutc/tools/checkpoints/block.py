"""What an MoE block does outside its routed experts, as its format states it
(`CheckpointFormat.routed_scale`, `shared_combination`, `router_extra_rows`, `identity_experts`,
`hash_routing`, `post_norm`), and the runner's combination step that reproduces it around the kernel.

The reference is transformers' block's routed part, `block(x) - block(x)` with the experts' output
zeroed (layoutc.tools.checkpoints.reference.block_routed). That difference is what the block makes
of the experts module's output, so:

- a scale after the experts (LagunaSparseMoeBlock, MiniMaxM3VLSparseMoeBlock: `hidden_states *
  self.routed_scaling_factor` after `self.experts(...)`) multiplies it: the kernel's output is
  multiplied by the same factor (vLLM applies `routed_scaling_factor` to the fused experts' output
  the same way, outside the kernel);
- an average with the shared expert (Cohere2MoeSparseMoeBlock, strategy "average": `(routed +
  shared) / 2`) halves it;
- identity ("zero") experts (LongcatFlashExperts: an expert id >= n_routed_experts returns the
  token itself, times its weight) live inside the experts module: the kernel runs the routed slots
  (an identity slot is given expert 0 at weight 0) and the identity slots are added as
  `x * weight`, as vLLM's zero-expert path adds them next to the fused kernel;
- a norm over routed + shared after the MoE (AXK1MoE `post_mlp_layernorm`) makes the difference
  depend on the shared expert: no kernel output can be compared with it, and `run` refuses (LR146).

Only torch (and the format); no transformers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from layoutc.tools.checkpoints.checkpoint_format import config_value
from layoutc.tools.checkpoints.errors import FormatError

#: config keys that name a factor on the routed output in transformers 5.19's configs
#: (DeepSeek-V3, MiniMax-M3, LongCat: routed_scaling_factor; Inkling: route_scale; Laguna:
#: moe_routed_scaling_factor). Which of them a block applies after its experts is the format's
#: `routed_scale`; the ratio diagnosis (`explain_ratio`) names the one whose value is the ratio.
SCALE_KEYS = ("routed_scaling_factor", "route_scale", "moe_routed_scaling_factor")
#: config key of Cohere2-MoE's combination of routed and shared output ("sum" or "average")
COMBINATION_KEY = "shared_expert_combination_strategy"
#: the per-layer type that marks a hash-routed MoE layer (DeepseekV4Config.mlp_layer_types)
HASH_LAYER = "hash_moe"


@dataclass(frozen=True)
class BlockOps:
    """A format's block-level facts resolved against one config.json.

    routed_scale: the factor after the experts (1.0: none); scale_key: the config key it was read
    from. combination: "sum" or "average". router_extra_rows / identity_experts: router rows past
    the E routed experts that score shared experts / identity experts (ids E..E+Z-1). hash_layers:
    the layers routed by token id. post_norm: the norm after the MoE, or None.
    """

    routed_scale: float = 1.0
    scale_key: str | None = None
    combination: str = "sum"
    router_extra_rows: int = 0
    identity_experts: int = 0
    hash_layers: tuple[int, ...] = ()
    post_norm: str | None = None

    @property
    def factor(self) -> float:
        """What the block multiplies the experts module's output by in its routed part."""
        return self.routed_scale * (0.5 if self.combination == "average" else 1.0)

    @property
    def router_rows(self) -> int:
        """Router rows past the routed experts."""
        return self.router_extra_rows + self.identity_experts

    def words(self) -> str:
        """The facts in words for the report ("" when the block adds nothing to its experts)."""
        parts = []
        if self.routed_scale != 1.0:
            parts.append(f"routed output x{self.routed_scale:g} after the experts ({self.scale_key})")
        if self.combination == "average":
            parts.append("(routed + shared) / 2: the routed part x0.5")
        if self.identity_experts:
            parts.append(f"{self.identity_experts} identity experts (token x weight, added beside the kernel)")
        if self.router_extra_rows:
            parts.append(f"{self.router_extra_rows} router rows for shared experts")
        if self.hash_layers:
            parts.append(f"layers {', '.join(map(str, self.hash_layers))} routed by token id (hash)")
        return "; ".join(parts)



def _count(cfg: dict[str, Any], keys: tuple[str, ...], what: str) -> int:
    for key in keys:
        value = config_value(cfg, key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise FormatError("LR102", f"config.json: {key} ({what}) must be a non-negative integer, got {value!r}")
        return value
    if keys:
        raise FormatError("LR102", f"config.json has none of {', '.join(keys)} ({what}, the format's declaration)")
    return 0


def block_ops(moe: Any) -> BlockOps:
    """`moe.format`'s block-level fields read from `moe.text_config` (describe()'s MoEModelConfig).

    Raises FormatError LR102 when a declared key is absent or its value is not a finite
    positive number (routed_scale), a non-negative integer (the row counts) or a list
    (hash_routing)."""
    fmt, cfg = moe.format, moe.text_config if isinstance(moe.text_config, dict) else {}
    scale, key = 1.0, None
    for k in fmt.routed_scale:
        value = config_value(cfg, k)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise FormatError("LR102", f"config.json: {k} (the routed-output scale) must be a positive number, "
                              f"got {value!r}")
        scale, key = float(value), k
        break
    else:
        if fmt.routed_scale:
            raise FormatError("LR102", f"config.json has none of {', '.join(fmt.routed_scale)} (the routed-output "
                              "scale the format declares)")
    hash_layers: tuple[int, ...] = ()
    if fmt.hash_routing is not None:
        types = config_value(cfg, fmt.hash_routing)
        if not isinstance(types, list):  # absent or not a list: hash routing declared, never read (issue 45 F7b)
            raise FormatError("LR102", f"config.json: {fmt.hash_routing} (the per-layer MoE types whose "
                              f"{HASH_LAYER!r} entries mark the hash-routed layers, the format's hash_routing) "
                              + ("is absent" if types is None else f"must be a list, got {str(types)[:80]!r}"))
        hash_layers = tuple(i for i, t in enumerate(types) if t == HASH_LAYER)
    return BlockOps(scale, key, fmt.shared_combination,
                    _count(cfg, fmt.router_extra_rows, "router rows of shared experts"),
                    _count(cfg, fmt.identity_experts, "identity experts"), hash_layers, fmt.post_norm)


def refuse_post_norm(moe: Any) -> None:
    """FormatError LR146 when the format declares a norm after the MoE (`post_norm`)."""
    fmt = moe.format
    if fmt.post_norm is not None:
        raise FormatError("LR146", f"model_type {fmt.model_type!r}: the block applies a norm "
                          f"({fmt.layer_prefix}{fmt.post_norm}) to routed + shared output after the MoE, so the "
                          "routed experts' part of its output cannot be isolated and no kernel output can be "
                          "compared with the block; layoutc run cannot check this family (its kernel path would "
                          "need the norm and the shared expert outside the kernel)")


def kernel_routing(weights: Any, ids: Any, num_experts: int) -> tuple[Any, Any]:
    """The routing the kernel gets: an identity slot (id >= num_experts) becomes expert 0 at
    weight 0, so it adds nothing there. weights float [T, k], ids integer [T, k]; same shapes out."""
    identity = ids >= num_experts
    if not bool(identity.any()):
        return weights, ids
    return weights.masked_fill(identity, 0.0), ids.masked_fill(identity, 0)


def combine(out: Any, x: Any, weights: Any, ids: Any, ops: BlockOps, num_experts: int) -> Any:
    """The block's routed part from the kernel's output `out` [T, H]: the identity slots' tokens
    times their weights added, then times `ops.factor`. Float32 [T, H]."""
    import torch

    total = out.to(torch.float32)
    identity = ids >= num_experts
    if ops.identity_experts and bool(identity.any()):
        w = (weights.to(torch.float32) * identity).sum(-1, keepdim=True)
        total = total + x.to(torch.float32) * w
    return total * ops.factor if ops.factor != 1.0 else total


def fit_ratio(out: Any, ref: Any) -> tuple[float, float]:
    """(c, residual): the factor c minimising ||ref - c * out|| and the relative error left,
    ||ref - c * out|| / ||ref||. (nan, inf) when `out` is zero."""
    import torch

    o, r = out.to(torch.float64).flatten(), ref.to(torch.float64).flatten()
    denom = float(o @ o)
    if denom == 0.0 or float(r @ r) == 0.0:
        return math.nan, math.inf
    c = float(o @ r) / denom
    return c, float(torch.linalg.vector_norm(r - c * o) / torch.linalg.vector_norm(r))


def ratio_keys(cfg: dict[str, Any], c: float) -> list[str]:
    """The config keys that explain a constant ratio c: a SCALE_KEYS value equal to c (at the top
    level or under text_config), or `shared_expert_combination_strategy: average` for c = 0.5."""
    found = []
    for scope, prefix in ((cfg, ""), (cfg.get("text_config"), "text_config.")):
        if not isinstance(scope, dict):
            continue
        for k in SCALE_KEYS:
            v = scope.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isclose(v, c, rel_tol=1e-3):
                found.append(prefix + k)
        if scope.get(COMBINATION_KEY) == "average" and math.isclose(c, 0.5, rel_tol=1e-3):
            found.append(prefix + COMBINATION_KEY)
    return found


def declared_factor_words(ops: BlockOps, routed_scale: tuple[str, ...], c: float) -> str:
    """A constant ratio c (the block's routed output / the output with the format's block step
    `ops` applied) where the format declares a factor (`ops.factor` != 1): the declared fields
    and what the block measures (issue 45 F7a: not "a scale no config key holds")."""
    declared = []
    if ops.scale_key is not None:
        declared.append(f"routed_scale {list(routed_scale)!r} (config.json {ops.scale_key} = {ops.routed_scale:g})")
    if ops.combination == "average":
        declared.append('shared_combination "average" (x0.5)')
    measured = ops.factor * c
    none = " (it applies no scale after its experts)" if math.isclose(measured, 1.0, rel_tol=1e-3) else ""
    return (f"the format declares {' and '.join(declared)}: x{ops.factor:.4g} on the experts' output, but "
            f"transformers' block measures x{measured:.4g}{none}")


def explain_ratio(c: float, cfg: dict[str, Any], ops: BlockOps | None = None,
                  routed_scale: tuple[str, ...] = ()) -> str:
    """A constant ratio c between the block's routed output and the kernel's, in words, naming
    the config key that holds it when one does. With the format's block step `ops` (and its
    `routed_scale` keys) declaring a factor: the declared fields and what the block measures
    (`declared_factor_words`)."""
    if ops is not None and ops.factor != 1.0:
        return declared_factor_words(ops, routed_scale, c)
    keys = ratio_keys(cfg, c)
    head = (f"the block's routed output is x{c:.4g} the kernel's on every token: a scale outside the experts "
            "(after them, in the block), not a wrong layout")
    if keys:
        return head + f"; config.json's {' / '.join(keys)} holds it: declare it in the format (" + (
            "shared_combination \"average\"" if keys[0].endswith(COMBINATION_KEY) else
            f"routed_scale [\"{keys[0]}\"]") + ")"
    return head + f"; no config key holds {c:.4g} (tried {', '.join(SCALE_KEYS)}, {COMBINATION_KEY})"
