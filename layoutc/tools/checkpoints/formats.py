"""Checkpoint formats, declared per `model_type` of config.json: never inferred.

A `CheckpointFormat` says where one MoE layer's routed experts live in a
safetensors checkpoint and how they are oriented. Names are templates:
`{layer}` is the decoder layer index, `{e}` the expert index. Orientation is
relative to the contract's `[out, in]` order (w13 `[E, 2I, H]`, w2 `[E, H, I]`):
`transposed` means the checkpoint stores `x @ W` weights (`[.., in, out]`).
Every entry below was read from transformers 5.19's modeling code and its
`conversion_mapping.py` (which maps the on-disk names that `save_pretrained`
writes back to the fused in-memory parameters); each format's `source` cites it.

Shared experts (Qwen2-MoE `shared_expert`, DeepSeek `shared_experts`, Llama-4
`shared_expert`) are dense MLPs outside the routed experts: they are named here
so a tool can say so, and are never loaded into the routed-expert kernel.

Where the routing weight is applied is part of the format, `router_weight`:
"output" (`out = sum_k w_k * expert_k(x)`: Qwen, Mixtral, gpt-oss, DeepSeek, Gemma-4)
or "input" (`out = sum_k expert_k(w_k * x)`: Llama-4, whose `Llama4TextMoe.forward`
multiplies the router score into the experts' input). A kernel computes one or the
other: `layoutc run` holds the format's `router_weight` to what the contract's glue
declares it can compute (`GlueInterface.router_weight`) before it loads anything.

A user declares another format with a JSON file (`load_format_file`), whose keys
are the fields of `CheckpointFormat`. This module imports only the standard library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

from layoutc.runtime.algebra import Word
from layoutc.runtime.vocab import ACTIVATIONS as VOCAB_ACTIVATIONS
from layoutc.runtime.vocab import HF_ACTIVATIONS

#: The row layouts a fused gate/up checkpoint tensor may have (the loader's source layouts).
GATE_UP_LAYOUTS = (Word.HALVES.value, Word.INTERLEAVE.value)

#: Where a family applies the routing weight (CheckpointFormat.router_weight).
ROUTER_WEIGHTS = ("output", "input")

#: A config's `hidden_act` -> the contract activation: the gated ones of vocab.HF_ACTIVATIONS
#: (a checkpoint family's experts compute act(gate) * up).
ACTIVATIONS = {hf: name for hf, name in HF_ACTIVATIONS.items() if VOCAB_ACTIVATIONS[name].gated}


class FormatError(Exception):
    """config.json names no declared format, or a declared format is malformed."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"error[{code}]: {message}")
        self.code = code


@dataclass(frozen=True)
class CheckpointFormat:
    """How one family stores its routed experts (see the module docstring).

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
    num_experts / intermediate_size / top_k / activation: config keys (the first present wins).
    moe_layers: how MoE layers are found: "all", "decoder_sparse_step" (Qwen: every
    step-th layer, minus `mlp_only_layers`), "first_k_dense_replace" (DeepSeek, with
    `moe_layer_freq`), "enable_moe_block" (Gemma-4) or "moe_layers" (Llama-4's list).
    routing: "softmax_topk" (softmax, top-k, renormalised when the config's
    `norm_topk_prob` is true or absent-and-`renormalize`), "topk_softmax" (gpt-oss: top-k
    logits, softmax over them), "sigmoid_topk" (Llama-4).
    renormalize: default of norm_topk_prob when the config lacks it.
    shared_expert: prefix of a shared (dense) expert inside the layer, or None.
    swiglu: (alpha key, limit key) for swigluoai, read from config.json.
    experts_class: transformers' module class holding the routed experts ("module:Class"),
    or None when its forward does not take (hidden, top_k_index, top_k_weights).
    router_weight: where the routing weight multiplies: "output" (each expert's output,
    the default) or "input" (each expert's input, Llama-4; vLLM's apply_router_weight_on_input).
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
    num_experts: tuple[str, ...] = ("num_experts",)
    intermediate_size: tuple[str, ...] = ("moe_intermediate_size",)
    top_k: tuple[str, ...] = ("num_experts_per_tok",)
    activation: tuple[str, ...] = ("hidden_act",)
    fixed_activation: str | None = None
    moe_layers: str = "all"
    routing: str = "softmax_topk"
    renormalize: bool = True
    shared_expert: str | None = None
    swiglu: tuple[str, str] | None = None
    experts_class: str | None = None
    router_weight: str = "output"

    def names(self, layer: int, expert: int | None = None) -> dict[str, str]:
        """Full tensor names of layer `layer` by role: w13 parts ("gate", "up" or
        "gate_up"), "down", and biases ("gate_up_bias", "down_bias") when declared."""
        base = self.layer_prefix.format(layer=layer) + self.experts
        out: dict[str, str] = {}
        if self.fused:
            out["gate_up"] = base + str(self.gate_up)
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


_TF = "transformers 5.19 models/"
_PER_EXPERT: dict[str, Any] = {"fused": False, "gate": "{e}.gate_proj.weight", "up": "{e}.up_proj.weight",
               "down": "{e}.down_proj.weight"}

FORMATS: dict[str, CheckpointFormat] = {f.model_type: f for f in (
    CheckpointFormat(
        model_type="qwen3_moe", layer_prefix="model.layers.{layer}.", experts="mlp.experts.", **_PER_EXPERT,
        num_experts=("num_experts", "num_local_experts"), moe_layers="decoder_sparse_step", experts_class="qwen3_moe.modeling_qwen3_moe:Qwen3MoeExperts",
        source=_TF + "qwen3_moe/modeling_qwen3_moe.py (Qwen3MoeSparseMoeBlock: mlp.gate, mlp.experts; "
        "Qwen3MoeDecoderLayer: decoder_sparse_step, mlp_only_layers); conversion_mapping.py 'qwen2_moe' "
        "(qwen3_moe aliases it): mlp.experts.*.gate_proj/up_proj/down_proj.weight, [out, in]"),
    CheckpointFormat(
        model_type="qwen2_moe", layer_prefix="model.layers.{layer}.", experts="mlp.experts.", **_PER_EXPERT,
        num_experts=("num_experts", "num_local_experts"), moe_layers="decoder_sparse_step",
        shared_expert="mlp.shared_expert.", experts_class="qwen2_moe.modeling_qwen2_moe:Qwen2MoeExperts",
        renormalize=False,
        source=_TF + "qwen2_moe/modeling_qwen2_moe.py (Qwen2MoeSparseMoeBlock: gate, experts, shared_expert, "
        "shared_expert_gate; Qwen2MoeTopKRouter: norm_topk_prob); conversion_mapping.py 'qwen2_moe'"),
    CheckpointFormat(
        model_type="mixtral", layer_prefix="model.layers.{layer}.", experts="block_sparse_moe.experts.",
        fused=False, gate="{e}.w1.weight", up="{e}.w3.weight", down="{e}.w2.weight",
        router="block_sparse_moe.gate.weight", num_experts=("num_local_experts",),
        intermediate_size=("intermediate_size",), experts_class="mixtral.modeling_mixtral:MixtralExperts",
        source=_TF + "mixtral/modeling_mixtral.py (MixtralExperts, MixtralTopKRouter); conversion_mapping.py "
        "'mixtral': .block_sparse_moe. -> .mlp., experts.*.w1 (gate) + w3 (up) -> gate_up_proj, w2 -> down_proj"),
    CheckpointFormat(
        model_type="gemma4_text", layer_prefix="model.layers.{layer}.", experts="experts.", fused=True,
        gate=None, up=None, gate_up="gate_up_proj", down="down_proj", router="router.proj.weight",
        top_k=("top_k_experts",), activation=("hidden_activation",), moe_layers="enable_moe_block",
        experts_class="gemma4.modeling_gemma4:Gemma4TextExperts",
        source=_TF + "gemma4/modeling_gemma4.py (Gemma4TextExperts: gate_up_proj [E, 2I, H] chunked "
        "gate|up, down_proj [E, H, I]; Gemma4TextDecoderLayer: router, experts, enable_moe_block; "
        "Gemma4TextRouter: softmax, top-k, renormalise, per_expert_scale)"),
    CheckpointFormat(
        model_type="gpt_oss", layer_prefix="model.layers.{layer}.", experts="mlp.experts.", fused=True,
        gate=None, up=None, gate_up="gate_up_proj", down="down_proj", gate_up_layout=Word.INTERLEAVE.value,
        transposed=True, down_transposed=True, gate_up_bias="gate_up_proj_bias", down_bias="down_proj_bias",
        router="mlp.router.weight", router_bias="mlp.router.bias", num_experts=("num_local_experts",),
        intermediate_size=("intermediate_size",), fixed_activation="swigluoai", routing="topk_softmax",
        swiglu=("swiglu_alpha", "swiglu_limit"), experts_class="gpt_oss.modeling_gpt_oss:GptOssExperts",
        source=_TF + "gpt_oss/modeling_gpt_oss.py (GptOssExperts: gate_up_proj [E, H, 2I] read as x @ W, "
        "gate = [..., ::2], up = [..., 1::2]; down_proj [E, I, H]; biases; GptOssTopKRouter: top-k "
        "logits then softmax)"),
    CheckpointFormat(
        model_type="llama4_text", layer_prefix="model.layers.{layer}.", experts="feed_forward.experts.",
        fused=True, gate=None, up=None, gate_up="gate_up_proj", down="down_proj", transposed=True,
        down_transposed=True, router="feed_forward.router.weight", num_experts=("num_local_experts",),
        intermediate_size=("intermediate_size",), moe_layers="moe_layers", routing="sigmoid_topk",
        shared_expert="feed_forward.shared_expert.", router_weight="input",
        source=_TF + "llama4/modeling_llama4.py (Llama4TextExperts: gate_up_proj [E, H, 2I], bmm then "
        "chunk gate|up; down_proj [E, I, H]; Llama4TextMoe: router, shared_expert, routed_in = "
        "hidden_states * router_scores (the weight on the experts' input); Llama4Router: sigmoid of the "
        "top-k logits; Llama4TextDecoderLayer: layer_idx in config.moe_layers)"),
    CheckpointFormat(
        model_type="deepseek_v3", layer_prefix="model.layers.{layer}.", experts="mlp.experts.", **_PER_EXPERT,
        num_experts=("n_routed_experts",), moe_layers="first_k_dense_replace", shared_expert="mlp.shared_experts.",
        experts_class="deepseek_v3.modeling_deepseek_v3:DeepseekV3Experts",
        source=_TF + "deepseek_v3/modeling_deepseek_v3.py (DeepseekV3MoE: experts, gate, shared_experts; "
        "DeepseekV3DecoderLayer: layer_idx >= first_k_dense_replace); conversion_mapping.py: "
        "deepseek_v3 aliases 'qwen2_moe' (per-expert gate_proj/up_proj/down_proj)"),
    CheckpointFormat(
        model_type="deepseek_v2", layer_prefix="model.layers.{layer}.", experts="mlp.experts.", **_PER_EXPERT,
        num_experts=("n_routed_experts",), moe_layers="first_k_dense_replace", shared_expert="mlp.shared_experts.",
        experts_class="deepseek_v2.modeling_deepseek_v2:DeepseekV2Experts",
        source=_TF + "deepseek_v2/modeling_deepseek_v2.py (DeepseekV2Moe; DeepseekV2DecoderLayer: "
        "layer_idx >= first_k_dense_replace); conversion_mapping.py: deepseek_v2 aliases 'qwen2_moe'"),
)}
# Multimodal wrappers: the same experts under the language model's prefix.
FORMATS["gemma4"] = replace(FORMATS["gemma4_text"], model_type="gemma4", text_config=True,
                            layer_prefix="model.language_model.layers.{layer}.")
FORMATS["llama4"] = replace(FORMATS["llama4_text"], model_type="llama4", text_config=True,
                            layer_prefix="language_model.model.layers.{layer}.")


@dataclass(frozen=True)
class ModelMoE:
    """What a checkpoint's config.json says about its routed experts (via its format)."""

    format: CheckpointFormat
    num_experts: int
    hidden_size: int
    intermediate_size: int
    top_k: int
    activation: str  # a contract activation name: silu, gelu, gelu_tanh, swigluoai
    moe_layers: tuple[int, ...]
    norm_topk_prob: bool
    swiglu_alpha: float | None
    swiglu_limit: float | None
    text_config: dict[str, Any]


def _get(cfg: dict[str, Any], keys: tuple[str, ...], what: str, model_type: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    raise FormatError("LR102", f"config.json of model_type {model_type!r} has none of "
                      f"{', '.join(keys)} ({what})")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FormatError("LR102", f"config.json: {what} must be a positive integer, got {value!r}")
    return value


def describe(config: dict[str, Any], fmt: CheckpointFormat | None = None) -> ModelMoE:
    """The routed-expert settings of a parsed config.json.

    fmt: a user-declared format; None looks up FORMATS by config["model_type"].
    Raises FormatError: LR101 unknown model_type (listing the declared ones and how to
    declare another), LR102 a missing or bad config value.
    """
    model_type = str(config.get("model_type"))
    if fmt is None:
        fmt = FORMATS.get(model_type)
        if fmt is None:
            raise FormatError("LR101", f"no checkpoint format is declared for model_type {model_type!r}; "
                              f"declared: {', '.join(sorted(FORMATS))}. Declare one with --format-file "
                              "FILE.json (the fields of layoutc.tools.checkpoints.formats.CheckpointFormat)")
    cfg = config.get("text_config") if fmt.text_config else config
    if not isinstance(cfg, dict):
        raise FormatError("LR102", f"config.json of model_type {model_type!r} has no text_config object")
    mt = fmt.model_type
    layers = _int(_get(cfg, ("num_hidden_layers",), "number of layers", mt), "num_hidden_layers")
    experts = _int(_get(cfg, fmt.num_experts, "number of routed experts", mt), "num_experts")
    if fmt.fixed_activation is not None:
        activation = fmt.fixed_activation
    else:
        act = str(_get(cfg, fmt.activation, "activation", mt))
        if act not in ACTIVATIONS:
            raise FormatError("LR102", f"config.json activation {act!r} has no contract activation; "
                              f"known: {', '.join(sorted(ACTIVATIONS))}")
        activation = ACTIVATIONS[act]
    alpha = limit = None
    if fmt.swiglu is not None:
        alpha = float(_get(cfg, (fmt.swiglu[0],), "swiglu alpha", mt))
        limit = float(_get(cfg, (fmt.swiglu[1],), "swiglu limit", mt))
    norm = cfg.get("norm_topk_prob")
    return ModelMoE(
        format=fmt, num_experts=experts,
        hidden_size=_int(_get(cfg, ("hidden_size",), "hidden size", mt), "hidden_size"),
        intermediate_size=_int(_get(cfg, fmt.intermediate_size, "expert intermediate size", mt),
                               "intermediate_size"),
        top_k=_int(_get(cfg, fmt.top_k, "experts per token", mt), "top_k"),
        activation=activation, moe_layers=_moe_layers(fmt, cfg, layers),
        norm_topk_prob=fmt.renormalize if norm is None else bool(norm),
        swiglu_alpha=alpha, swiglu_limit=limit, text_config=cfg,
    )


def _moe_layers(fmt: CheckpointFormat, cfg: dict[str, Any], layers: int) -> tuple[int, ...]:
    rule = fmt.moe_layers
    if rule == "all":
        return tuple(range(layers))
    if rule == "decoder_sparse_step":
        step = int(cfg.get("decoder_sparse_step") or 1)
        dense = set(cfg.get("mlp_only_layers") or [])
        return tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)
    if rule == "first_k_dense_replace":
        first, freq = int(cfg.get("first_k_dense_replace") or 0), int(cfg.get("moe_layer_freq") or 1)
        return tuple(i for i in range(layers) if i >= first and i % freq == 0)
    if rule == "enable_moe_block":
        return tuple(range(layers)) if cfg.get("enable_moe_block") else ()
    if rule == "moe_layers":
        listed = cfg.get("moe_layers")
        if listed is None:
            step = int(cfg.get("interleave_moe_layer_step") or 1)
            listed = list(range(step - 1, layers, step))
        return tuple(int(i) for i in listed)
    raise FormatError("LR103", f"format {fmt.model_type!r}: unknown moe_layers rule {rule!r}")


_TUPLES = {"num_experts", "intermediate_size", "top_k", "activation", "swiglu"}


def load_format_file(path: str) -> CheckpointFormat:
    """A user-declared format from a JSON object whose keys are CheckpointFormat's fields.

    Raises FormatError LR103 on unreadable JSON, unknown or missing keys, or bad values.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise FormatError("LR103", f"{path}: cannot read a JSON format: {exc}") from None
    if not isinstance(data, dict):
        raise FormatError("LR103", f"{path}: a format is a JSON object")
    known = {f.name for f in fields(CheckpointFormat)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise FormatError("LR103", f"{path}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    data.setdefault("source", f"user format {path}")
    for k in _TUPLES & set(data):
        if isinstance(data[k], list):
            data[k] = tuple(data[k])
        elif isinstance(data[k], str) and k != "swiglu":
            data[k] = (data[k],)
    try:
        fmt = CheckpointFormat(**data)
    except TypeError as exc:
        raise FormatError("LR103", f"{path}: {exc}") from None
    if fmt.gate_up_layout not in GATE_UP_LAYOUTS:
        raise FormatError("LR103", f"{path}: gate_up_layout must be {' or '.join(map(repr, GATE_UP_LAYOUTS))}")
    if fmt.router_weight not in ROUTER_WEIGHTS:
        raise FormatError("LR103", f"{path}: router_weight must be 'output' (the weight multiplies each "
                          f"expert's output) or 'input' (each expert's input, as Llama-4), got {fmt.router_weight!r}")
    if (fmt.fused and not fmt.gate_up) or (not fmt.fused and not (fmt.gate and fmt.up)):
        raise FormatError("LR103", f"{path}: a fused format names gate_up; a per-expert one gate and up")
    return fmt
