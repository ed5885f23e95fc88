"""`CheckpointFormat`: how one model family stores its routed experts in a safetensors
checkpoint (layoutc.tools.checkpoints.formats declares one per `model_type` in `FORMATS`, and
reads a user's from JSON). Alone in its module, below everything that names a format: the
quantized schemes (quant/scheme.py), the model-config record (moeconfig.py) and the format
table itself, so none of them imports another to name the type. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from layoutc.runtime.algebra import Word


@dataclass(frozen=True)
class CheckpointFormat:
    """How one family stores its routed experts (see layoutc.tools.checkpoints.formats' module docstring).

    model_type: config.json's `model_type` this applies to.
    source: where each fact below comes from (file and class in transformers).
    text_config: the MoE settings live under config["text_config"] (multimodal wrappers).
    layer_prefix: name prefix of decoder layer `{layer}`, e.g. "model.layers.{layer}.".
    experts: prefix of the experts module inside a layer, e.g. "mlp.experts.".
    fused: one tensor holds every expert ([E, ...]); else one tensor per expert.
    gate / up / down: per-expert names (with `{e}`), or the fused names (gate_up, down).
    gate_up_layout: rows of a fused gate/up tensor, a layout word: `halves` ([gate | up]) or `interleave` (pairs).
    transposed / down_transposed: the w13 / w2 source stores `[in, out]` (`x @ W`).
    gate_up_bias / down_bias: bias names (None: no biases).
    router / router_bias: the router's weight (and bias) relative to the layer prefix.
    num_hidden_layers / hidden_size / num_experts / intermediate_size / top_k / activation:
    config keys (the first present wins); a dotted key reads a sub-object
    ("ffn_config.moe_num_experts"; an activation object's "ffn_act_fn.name").
    moe_layers: which layers are MoE: an explicit tuple of layer indices; "tensors" (the
    layers whose expert tensors the checkpoint holds); or a rule over config keys: "all",
    "decoder_sparse_step" (Qwen: every step-th layer, minus `mlp_only_layers`),
    "first_k_dense_replace" (DeepSeek, with `moe_layer_freq`), "enable_moe_block"
    (Gemma-4), "moe_layers" (Llama-4's list), "moe_layer_interval" (ERNIE-4.5:
    `(i + 1) % moe_layer_interval == 0` within `moe_layer_start_index`..`moe_layer_end_index`),
    "expert_layer_period" (Jamba: `i % expert_layer_period == expert_layer_offset`) or
    "num_dense_layers" (LFM2-MoE: the first `num_dense_layers` are dense).
    experts_flattened: a fused tensor stacks the experts along its rows (`[E * rows, cols]`,
    DBRX) instead of a leading experts axis. A fused format names either one gate_up
    tensor, or separate fused gate and up tensors (DBRX's w1 and v1).
    routing: "softmax_topk" (softmax, top-k, renormalised when the config's
    `norm_topk_prob` is true or absent-and-`renormalize`), "topk_softmax" (gpt-oss: top-k
    logits, softmax over them), "sigmoid_topk" (Llama-4).
    renormalize: default of norm_topk_prob when the config lacks it.
    shared_expert: prefix of a shared (dense) expert inside the layer, or None.
    swiglu: (alpha key, limit key) for swigluoai, read from config.json.
    swiglu_defaults: (alpha, limit) where config.json leaves a swiglu key out (gpt-oss: 1.702 and
    7.0, transformers GptOssConfig's swiglu_alpha / swiglu_limit defaults, read by GptOssExperts).
    experts_class: transformers' module class holding the routed experts ("module:Class"),
    or None when its forward does not take (hidden, top_k_index, top_k_weights).
    router_weight: where the routing weight multiplies: "output" (each expert's output,
    the default) or "input" (each expert's input, Llama-4; vLLM's apply_router_weight_on_input).

    What the block does outside its experts (layoutc.tools.checkpoints.block reads them):
    routed_scale: config keys of a factor the block multiplies the experts' summed output by,
    after the experts (LagunaSparseMoeBlock `moe_routed_scaling_factor`, MiniMaxM3VLSparseMoeBlock
    `routed_scaling_factor`); () for none. A factor the router puts into the routing weights
    (DeepSeek-V3's) is not one: the captured weights carry it.
    shared_combination: how the block combines routed and shared output: "sum" or "average"
    (Cohere2MoeSparseMoeBlock with `shared_expert_combination_strategy: average`: (routed + shared) / 2).
    router_extra_rows: config keys of the router rows past the routed experts that score shared
    experts (InklingTopkRouter: `n_shared_experts`); () for none.
    identity_experts: config keys of the identity ("zero") experts the router may pick, ids E..E+Z-1,
    whose output is the token times its weight (LongcatFlashExperts: `zero_expert_num`); () for none.
    hash_routing: config key of the per-layer MoE types whose entry "hash_moe" marks a layer routed
    by a token-id table, the block's forward taking input_ids (DeepseekV4HashRouter: `mlp_layer_types`).
    post_norm: name (relative to the layer prefix) of a norm the block applies to routed + shared
    after the MoE (AXK1MoE `post_mlp_layernorm`): the routed part cannot be isolated, `run` refuses (LR146).
    gated: the experts compute act(gate) * up (the default); False: non-gated experts,
    down(act(up(x))) with no gate (transformers' NemotronHExperts, `has_gate=False`, relu2):
    `up` names the up projection ([I, H] per expert, [E, I, H] fused), `gate` and `gate_up` are None.
    """

    model_type: str
    source: str
    layer_prefix: str
    experts: str
    fused: bool
    gate: str | None
    up: str | None
    down: str
    gate_up: str | None = None
    gate_up_layout: str = Word.HALVES.value
    transposed: bool = False
    down_transposed: bool = False
    gate_up_bias: str | None = None
    down_bias: str | None = None
    router: str = "mlp.gate.weight"
    router_bias: str | None = None
    text_config: bool = False
    num_hidden_layers: tuple[str, ...] = ("num_hidden_layers",)
    hidden_size: tuple[str, ...] = ("hidden_size",)
    num_experts: tuple[str, ...] = ("num_experts",)
    intermediate_size: tuple[str, ...] = ("moe_intermediate_size",)
    top_k: tuple[str, ...] = ("num_experts_per_tok",)
    activation: tuple[str, ...] = ("hidden_act",)
    fixed_activation: str | None = None
    moe_layers: str | tuple[int, ...] = "all"
    experts_flattened: bool = False
    routing: str = "softmax_topk"
    renormalize: bool = True
    shared_expert: str | None = None
    swiglu: tuple[str, str] | None = None
    swiglu_defaults: tuple[float, float] | None = None
    experts_class: str | None = None
    router_weight: str = "output"
    routed_scale: tuple[str, ...] = ()
    shared_combination: str = "sum"
    router_extra_rows: tuple[str, ...] = ()
    identity_experts: tuple[str, ...] = ()
    hash_routing: str | None = None
    post_norm: str | None = None
    gated: bool = True

    def names(self, layer: int, expert: int | None = None) -> dict[str, str]:
        """Full tensor names of layer `layer` by role: w13 parts ("gate", "up" or
        "gate_up"; a non-gated format's "up" alone), "down", and biases ("gate_up_bias",
        "down_bias") when declared."""
        base = self.layer_prefix.format(layer=layer) + self.experts
        out: dict[str, str] = {}
        if not self.gated:  # up -> act -> down (Nemotron-H): no gate
            assert self.up is not None and (self.fused or expert is not None)
            out["up"] = base + (self.up if self.fused else self.up.format(e=expert))
            out["down"] = base + (self.down if self.fused else self.down.format(e=expert))
        elif self.fused and self.gate_up:
            out["gate_up"] = base + self.gate_up
            out["down"] = base + self.down
        elif self.fused:  # separate fused gate and up tensors (DBRX's w1, v1)
            out["gate"] = base + str(self.gate)
            out["up"] = base + str(self.up)
            out["down"] = base + self.down
        else:
            assert expert is not None and self.gate is not None and self.up is not None
            out["gate"] = base + self.gate.format(e=expert)
            out["up"] = base + self.up.format(e=expert)
            out["down"] = base + self.down.format(e=expert)
        if self.gate_up_bias is not None:
            out["gate_up_bias"] = base + self.gate_up_bias.format(e=expert)
        if self.down_bias is not None:
            out["down_bias"] = base + self.down_bias.format(e=expert)
        return out

    def router_names(self, layer: int) -> tuple[str, str | None]:
        """`layer`'s router weight name and its bias name (None when the format declares none)."""
        base = self.layer_prefix.format(layer=layer)
        return base + self.router, (base + self.router_bias) if self.router_bias else None


def config_value(cfg: dict[str, Any], key: str) -> Any:
    """config.json's value at `key`, a dotted path into sub-objects ("text_config.num_experts",
    docs/formats.md "A config key may be dotted"); None where a part is absent or not an object."""
    value: Any = cfg
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
