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

import math
import re
from collections.abc import Collection
from dataclasses import MISSING, fields, replace
from typing import Any

from layoutc.runtime.algebra import Word
from layoutc.runtime.vocab import ACTIVATIONS as VOCAB_ACTIVATIONS
from layoutc.runtime.vocab import HF_ACTIVATIONS
from layoutc.tools.checkpoints.checkpoint_format import CheckpointFormat, config_value
from layoutc.tools.checkpoints.errors import FormatError
from layoutc.tools.checkpoints.families import GENERIC_KEYS, moe_layers_by_rule, pattern_length, swiglu_values
from layoutc.tools.checkpoints.families import MOE_LAYER_RULES as RULES
from layoutc.tools.checkpoints.header import read_json_object
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig

#: The row layouts a fused gate/up checkpoint tensor may have (the loader's source layouts).
GATE_UP_LAYOUTS = (Word.HALVES.value, Word.INTERLEAVE.value)

#: Where a family applies the routing weight (CheckpointFormat.router_weight).
ROUTER_WEIGHTS = ("output", "input")

#: the most decoder layers a config may declare (layoutc.tools.hfconfig.parse.MAX_LAYERS)
MAX_LAYERS = 100_000

#: A config's `hidden_act` -> the contract activation: the gated ones of vocab.HF_ACTIVATIONS
#: (a checkpoint family's experts compute act(gate) * up).
ACTIVATIONS = {hf: name for hf, name in HF_ACTIVATIONS.items() if VOCAB_ACTIVATIONS[name].gated}
#: The same for a non-gated format (`gated` false: down(act(up(x)))): relu2 (Nemotron-H's
#: `mlp_hidden_act`, transformers ACT2FN's ReLUSquaredActivation) and the `_no_mul` forms.
NON_GATED_ACTIVATIONS = {"relu2": "relu2", "silu": "silu_no_mul", "swish": "silu_no_mul", "gelu": "gelu_no_mul"}


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
        swiglu=("swiglu_alpha", "swiglu_limit"), swiglu_defaults=(1.702, 7.0),
        experts_class="gpt_oss.modeling_gpt_oss:GptOssExperts",
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
FORMATS["dbrx"] = CheckpointFormat(
    model_type="dbrx", layer_prefix="transformer.blocks.{layer}.", experts="ffn.experts.mlp.", fused=True,
    gate="w1", up="v1", down="w2", experts_flattened=True, down_transposed=True, router="ffn.router.layer.weight",
    num_hidden_layers=("n_layers",), hidden_size=("d_model",), num_experts=("ffn_config.moe_num_experts",),
    intermediate_size=("ffn_config.ffn_hidden_size",), top_k=("ffn_config.moe_top_k",),
    activation=("ffn_config.ffn_act_fn.name",),
    source=_TF + "dbrx/modeling_dbrx.py (DbrxExpertGLU: w1 (gate), v1 (up), w2, each [E * I, H] viewed as "
    "[E, I, H]; gate = x @ w1.T, up = x @ v1.T, down = h @ w2 (w2 stored [in, out]); DbrxRouter: "
    "ffn.router.layer; DbrxConfig: d_model, n_layers, ffn_config)")
FORMATS["ernie4_5_moe"] = CheckpointFormat(
    model_type="ernie4_5_moe", layer_prefix="model.layers.{layer}.", experts="mlp.experts.", **_PER_EXPERT,
    num_experts=("moe_num_experts",), top_k=("moe_k",), moe_layers="moe_layer_interval",
    shared_expert="mlp.shared_experts.",
    source=_TF + "ernie4_5_moe/modeling_ernie4_5_moe.py (Ernie4_5_MoeDecoderLayer: a MoE layer iff "
    "(i + 1) % moe_layer_interval == 0 and moe_layer_start_index <= i <= moe_layer_end_index; "
    "Ernie4_5_MoeSparseMoeBlock: gate, experts, shared_experts); conversion_mapping.py: ernie4_5_moe "
    "extends 'qwen2_moe' (per-expert gate_proj/up_proj/down_proj)")
# Multimodal wrappers: the same experts under the language model's prefix.
FORMATS["gemma4"] = replace(FORMATS["gemma4_text"], model_type="gemma4", text_config=True,
                            layer_prefix="model.language_model.layers.{layer}.")
FORMATS["llama4"] = replace(FORMATS["llama4_text"], model_type="llama4", text_config=True,
                            layer_prefix="language_model.model.layers.{layer}.")


#: The generic entry: the config keys under every name a family is known to use
#: (families.GENERIC_KEYS, which `layoutc audit` reads) and the generic layer rule
#: (families.GENERIC_LAYER_RULES). No model_type maps to it: the proposer starts from its keys.
GENERIC = CheckpointFormat(
    model_type="generic", layer_prefix="model.layers.{layer}.", experts="mlp.experts.", **_PER_EXPERT,
    num_hidden_layers=GENERIC_KEYS["num_hidden_layers"], hidden_size=GENERIC_KEYS["hidden_size"],
    num_experts=GENERIC_KEYS["num_experts"], intermediate_size=GENERIC_KEYS["intermediate_size"],
    top_k=GENERIC_KEYS["top_k"], activation=GENERIC_KEYS["activation"], moe_layers="generic",
    source="the union of the built-in families' config keys and layer rules (layoutc.tools.checkpoints.families)")


def swiglu_params(config: dict[str, Any]) -> tuple[float, float] | None:
    """(alpha, limit) of a parsed config.json's swigluoai experts, by its family's `swiglu`
    keys and `swiglu_defaults` (gpt-oss: the config's swiglu_alpha / swiglu_limit, else
    transformers GptOssConfig's defaults 1.702 / 7.0); None for a family without swigluoai or not in FORMATS.
    Raises FormatError LR102 on a non-numeric value."""
    fmt = FORMATS.get(str(config.get("model_type")))
    if fmt is None or fmt.swiglu is None:
        return None
    cfg = config.get("text_config") if fmt.text_config else config
    alpha, limit, _ = swiglu_values(cfg if isinstance(cfg, dict) else {}, fmt.swiglu, fmt.swiglu_defaults)
    return alpha, limit



def _get(cfg: dict[str, Any], keys: tuple[str, ...], what: str, model_type: str) -> Any:
    for k in keys:
        value = config_value(cfg, k)
        if value is not None:
            return value
    raise FormatError("LR102", f"config.json of model_type {model_type!r} has none of "
                      f"{', '.join(keys)} ({what})")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FormatError("LR102", f"config.json: {what} must be a positive integer, got {value!r}")
    return value


def describe(config: dict[str, Any], fmt: CheckpointFormat | None = None,
             tensor_names: Collection[str] | None = None) -> MoEModelConfig:
    """The routed-expert settings of a parsed config.json, by its family's own keys (`layoutc
    run`'s reader; layoutc.tools.checkpoints.moeconfig says what it fills and what it leaves).

    fmt: a user-declared format; None looks up FORMATS by config["model_type"].
    tensor_names: the checkpoint's tensor names, for a format whose moe_layers is "tensors"
    (LR102 when it is and they are not given).
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
    stated = next((v for k in fmt.num_hidden_layers if (v := config_value(cfg, k)) is not None), pattern_length(cfg))
    layers = _int(stated if stated is not None else _get(cfg, fmt.num_hidden_layers, "number of layers", mt),
                  "num_hidden_layers")
    if layers > MAX_LAYERS:
        raise FormatError("LR102", f"config.json: num_hidden_layers is {layers} (at most {MAX_LAYERS}, "
                          "as layoutc audit)")
    experts = _int(_get(cfg, fmt.num_experts, "number of routed experts", mt), "num_experts")
    if fmt.fixed_activation is not None:  # hidden_act: as written where the config states one (gpt-oss: silu)
        activation = fmt.fixed_activation
        written = next((v for k in fmt.activation if isinstance(v := config_value(cfg, k), str)), None)
        hidden_act = written if written is not None else activation
    else:
        act = hidden_act = str(_get(cfg, fmt.activation, "activation", mt))
        table = ACTIVATIONS if fmt.gated else NON_GATED_ACTIVATIONS
        if act not in table:
            hint = ("; it is a non-gated activation (up -> act -> down, no gate, as Nemotron-H's experts): "
                    "declare the format's gated false" if fmt.gated and act in NON_GATED_ACTIVATIONS else "")
            raise FormatError("LR102", f"config.json activation {act!r} has no contract activation for "
                              f"{'gated' if fmt.gated else 'non-gated'} experts; known: "
                              f"{', '.join(sorted(table))}{hint}")
        activation = table[act]
    if VOCAB_ACTIVATIONS[activation].gated != fmt.gated:
        raise FormatError("LR103", f"format {mt!r}: activation {activation!r} is "
                          f"{'' if VOCAB_ACTIVATIONS[activation].gated else 'non-'}gated, but the format's gated is "
                          f"{str(fmt.gated).lower()}")
    alpha = limit = None
    if fmt.swiglu is not None:
        alpha, limit, _ = swiglu_values(cfg, fmt.swiglu, fmt.swiglu_defaults)
    norm = cfg.get("norm_topk_prob")
    if norm is not None and not isinstance(norm, bool):  # bool("no") is True: only JSON true/false decide
        raise FormatError("LR102", f"config.json: norm_topk_prob must be true or false, got {_show(norm)}")
    top_k = _int(_get(cfg, fmt.top_k, "experts per token", mt), "top_k")
    if top_k > experts:  # transformers' topk would fail after building the model
        raise FormatError("LR102", f"config.json: {fmt.top_k[0]} is {top_k}, more experts per token than the "
                          f"{experts} routed experts")
    name = config.get("_name_or_path")
    scopes = [("", config)] if cfg is config else [("text_config.", cfg), ("", config)]
    stated = [(where + k, v) for where, c in scopes for k in ("torch_dtype", "dtype") if (v := c.get(k)) is not None]
    for key, v in stated:  # transformers builds the reference with it: a list is an IndexError there
        if not isinstance(v, str):
            raise FormatError("LR102", f"config.json: {key} must be a dtype name (a string such as "
                              f"\"bfloat16\"), got {_show(v)}")
    dtype = next((v for _, v in stated), None)
    return MoEModelConfig(
        name=name if isinstance(name, str) and name else mt, num_experts=experts,
        hidden_size=_int(_get(cfg, fmt.hidden_size, "hidden size", mt), "hidden_size"),
        intermediate_size=_int(_get(cfg, fmt.intermediate_size, "expert intermediate size", mt),
                               "intermediate_size"),
        num_experts_per_tok=top_k, num_hidden_layers=layers,
        moe_layers=_moe_layers(fmt, cfg, layers, tensor_names),
        hidden_act=hidden_act, activation=activation, dtype=dtype,
        is_gated=VOCAB_ACTIVATIONS[activation].gated, format=fmt,
        norm_topk_prob=fmt.renormalize if norm is None else norm,
        swiglu_alpha=alpha, swiglu_limit=limit, text_config=cfg,
    )


def _moe_layers(fmt: CheckpointFormat, cfg: dict[str, Any], layers: int,
                tensor_names: Collection[str] | None = None) -> tuple[int, ...]:
    """The MoE layers of `fmt` for config `cfg` of `layers` decoder layers: its explicit list,
    the layers its tensors are in, or its rule (layoutc.tools.checkpoints.families)."""
    rule = fmt.moe_layers
    if isinstance(rule, tuple):
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in rule):
            raise FormatError("LR103", f"format {fmt.model_type!r}: moe_layers {list(rule)} must be layer "
                              f"indices in 0..{layers - 1}")
        return tuple(sorted(set(rule)))
    if rule == "tensors":
        return _layers_with_tensors(fmt, layers, tensor_names)
    try:
        return moe_layers_by_rule(rule, cfg, layers)[0]
    except FormatError as exc:
        if exc.code == "LR103":
            raise FormatError("LR103", f"format {fmt.model_type!r}: {str(exc).split(': ', 1)[1]}") from None
        raise


#: the moe_layers rules a format may name (CheckpointFormat.moe_layers)
MOE_LAYER_RULES = ("generic", "tensors", *RULES)


def _layers_with_tensors(fmt: CheckpointFormat, layers: int, tensor_names: Collection[str] | None) -> tuple[int, ...]:
    """The layers whose down projection (expert 0's, or the fused one) the checkpoint holds."""
    if tensor_names is None:
        raise FormatError("LR102", f"format {fmt.model_type!r}: moe_layers 'tensors' needs the checkpoint's "
                          "tensor names")
    names = set(tensor_names)
    return tuple(i for i in range(layers) if fmt.names(i, None if fmt.fused else 0)["down"] in names)


#: the block-level config-key fields of a format, each () for none (layoutc.tools.checkpoints.block)
BLOCK_KEYS = ("routed_scale", "router_extra_rows", "identity_experts")
_TUPLES = {"num_hidden_layers", "hidden_size", "num_experts", "intermediate_size", "top_k", "activation",
           "swiglu", "swiglu_defaults", "moe_layers", *BLOCK_KEYS}


def load_format_file(path: str) -> CheckpointFormat:
    """A user-declared format from a JSON object whose keys are CheckpointFormat's fields.

    The file is read within bounds (a regular file of at most 16 MiB, JSON nested at most
    64 levels: layoutc.tools.checkpoints.header.read_json_object). Raises FormatError LR103
    on an unreadable file or JSON, unknown or missing keys, or bad values.
    """
    data = read_json_object(path, "LR103", "a JSON format")
    known = {f.name for f in fields(CheckpointFormat)}
    unknown = sorted(set(data) - known)
    if unknown:
        shown = ", ".join(_show(k) for k in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise FormatError("LR103", f"{path}: unknown keys {shown}; known: {', '.join(sorted(known))}")
    data.setdefault("source", f"user format {path}")
    required = [f.name for f in fields(CheckpointFormat) if f.default is MISSING and f.default_factory is MISSING]
    missing = [k for k in required if k not in data]
    if missing:
        raise FormatError("LR103", f"{path}: missing keys {', '.join(missing)} (every format states "
                          f"{', '.join(required)}; docs/formats.md)")
    _check_values(path, data)
    for k in _TUPLES & set(data):
        if isinstance(data[k], list):
            data[k] = tuple(data[k])
        elif isinstance(data[k], str) and k not in ("swiglu", "swiglu_defaults", "moe_layers"):
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
    if not fmt.gated:
        if not fmt.up or fmt.gate is not None or fmt.gate_up is not None or fmt.gate_up_bias is not None:
            raise FormatError("LR103", f"{path}: a non-gated format (gated false) names its up projection as `up`, "
                              "and no gate, gate_up or gate_up_bias")
    elif (fmt.fused and not (fmt.gate_up or (fmt.gate and fmt.up))) or (not fmt.fused and not (fmt.gate and fmt.up)):
        raise FormatError("LR103", f"{path}: a fused format names gate_up (or separate fused gate and up); "
                          "a per-expert one gate and up")
    if fmt.experts_flattened and not fmt.fused:
        raise FormatError("LR103", f"{path}: experts_flattened applies to a fused format")
    if fmt.routing not in ROUTINGS:
        raise FormatError("LR103", f"{path}: routing must be one of {', '.join(ROUTINGS)}, got {_show(fmt.routing)}")
    if fmt.fixed_activation is not None and fmt.fixed_activation not in VOCAB_ACTIVATIONS:
        raise FormatError("LR103", f"{path}: fixed_activation {_show(fmt.fixed_activation)} is not a contract "
                          f"activation; known: {', '.join(sorted(VOCAB_ACTIVATIONS))}")
    if fmt.shared_combination not in SHARED_COMBINATIONS:
        raise FormatError("LR103", f"{path}: shared_combination must be {' or '.join(map(repr, SHARED_COMBINATIONS))}, "
                          f"got {_show(fmt.shared_combination)}")
    if isinstance(fmt.moe_layers, str) and fmt.moe_layers not in MOE_LAYER_RULES:
        raise FormatError("LR103", f"{path}: moe_layers {fmt.moe_layers!r} is none of {', '.join(MOE_LAYER_RULES)}, "
                          "nor a list of layer indices")
    return fmt


#: how a block combines routed and shared output (CheckpointFormat.shared_combination)
SHARED_COMBINATIONS = ("sum", "average")
#: the routings a format may declare (CheckpointFormat.routing; layoutc/tools/checkpoints/reference.py route)
ROUTINGS = ("softmax_topk", "topk_softmax", "sigmoid_topk")
#: the template fields of a format and the one placeholder each may hold (`names`, `router_names`)
TEMPLATES = {"layer_prefix": "layer", "gate": "e", "up": "e", "down": "e", "gate_up": "e", "gate_up_bias": "e",
             "down_bias": "e"}
_STR = ("model_type", "source", "layer_prefix", "experts", "down", "gate_up_layout", "router", "routing",
        "router_weight", "shared_combination")
_OPT_STR = ("gate", "up", "gate_up", "gate_up_bias", "down_bias", "router_bias", "fixed_activation", "shared_expert",
            "experts_class", "hash_routing", "post_norm")
_BOOL = ("fused", "transposed", "down_transposed", "text_config", "experts_flattened", "renormalize", "gated")
_KEYS = ("num_hidden_layers", "hidden_size", "num_experts", "intermediate_size", "top_k", "activation")
_MAX_VALUE_CHARS = 4096  # a name or config key longer than this is no tensor name a checkpoint holds
#: CheckpointFormat.experts_class: a module under transformers.models and a public class name
_EXPERTS_CLASS = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+:[A-Z][A-Za-z0-9_]*")


def _show(value: Any) -> str:
    """`value` for a message, at most 80 characters of its repr."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_values(path: str, data: dict[str, Any]) -> None:
    """The type of every key of a --format-file (JSON booleans for the flags: the string "false"
    is not false; strings for names; a list of strings or a string for config keys; a rule name
    or a list of layer indices for moe_layers; two strings / two numbers for swiglu /
    swiglu_defaults, or null), and every name template: only `{layer}` in layer_prefix and
    `{e}` in the expert names, with no format spec, conversion, index or attribute
    (`str.format` would otherwise evaluate `{e.__class__...}` or pad to `{layer:>999999999}`).
    Raises FormatError LR103 naming the key."""
    def bad(key: str, want: str) -> FormatError:
        return FormatError("LR103", f"{path}: {key} must be {want}, got {_show(data[key])}")

    def short(key: str, value: str) -> None:
        if len(value) > _MAX_VALUE_CHARS:
            raise FormatError("LR103", f"{path}: {key} is {len(value)} characters long (at most {_MAX_VALUE_CHARS})")

    for key in _STR:
        if key in data:
            if not isinstance(data[key], str):
                raise bad(key, "a string")
            short(key, data[key])
    for key in _OPT_STR:
        if key in data and data[key] is not None:
            if not isinstance(data[key], str):
                raise bad(key, "a string or null")
            short(key, data[key])
    for key in _BOOL:
        if key in data and not isinstance(data[key], bool):
            raise bad(key, "true or false (a JSON boolean)")
    for key in _KEYS:
        value = data.get(key)
        if key in data and not (isinstance(value, str) or (isinstance(value, list) and value
                                                           and all(isinstance(v, str) for v in value))):
            raise bad(key, "a config key or a non-empty list of config keys (strings)")
        for v in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
            short(key, v)
    for key in BLOCK_KEYS:  # config keys, or none: [] (or "" is refused as no key)
        value = data.get(key)
        if key in data and not ((isinstance(value, str) and value) or (isinstance(value, list) and all(
                isinstance(v, str) and v for v in value))):
            raise bad(key, "a config key or a list of config keys (strings; [] for none)")
        for v in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
            short(key, v)
    if "moe_layers" in data:
        value = data["moe_layers"]
        if not (isinstance(value, str) or (isinstance(value, list) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value))):
            raise bad("moe_layers", "a rule name or a list of layer indices")
    if data.get("swiglu") is not None:
        value = data["swiglu"]
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
            raise bad("swiglu", "null or two config keys [alpha, limit]")
    if data.get("swiglu_defaults") is not None:
        value = data["swiglu_defaults"]
        if not (isinstance(value, list) and len(value) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
            raise bad("swiglu_defaults", "null or two finite numbers [alpha, limit]")
    if isinstance(data.get("experts_class"), str) and not _EXPERTS_CLASS.fullmatch(data["experts_class"]):
        # imported as transformers.models.<module> and called with the config: no other shape is one
        raise bad("experts_class", "'module.path:Class' under transformers.models (e.g. "
                  "'qwen3_moe.modeling_qwen3_moe:Qwen3MoeExperts')")
    for key, placeholder in TEMPLATES.items():
        if isinstance(data.get(key), str):
            _check_template(path, key, data[key], placeholder)


def _check_template(path: str, key: str, text: str, placeholder: str) -> None:
    """FormatError LR103 unless every replacement field of `text` is exactly `{placeholder}`
    (`{{` and `}}` are literal braces, as in str.format)."""
    import string

    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise FormatError("LR103", f"{path}: {key} {_show(text)} is not a name template ({exc}); write a "
                          "literal brace as {{ or }}") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name != placeholder or spec or conversion is not None:
            field = "{" + name + (f"!{conversion}" if conversion is not None else "") + (f":{spec}" if spec else "") \
                + "}"
            raise FormatError("LR103", f"{path}: {key} holds the field {_show(field)}; a name template may hold only "
                              f"{{{placeholder}}}, with no format spec, conversion, index or attribute")


def format_json(fmt: CheckpointFormat) -> dict[str, Any]:
    """`fmt` as the JSON object a `--format-file` holds (tuples as lists; `load_format_file`
    reads it back to an equal format)."""
    out: dict[str, Any] = {}
    for f in fields(CheckpointFormat):
        value = getattr(fmt, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def describe_formats() -> str:
    """The built-in families, one line each: model_type, layout, where the experts are, which
    layers are MoE, and the transformers source it was read from (`layoutc formats`)."""
    lines = [f"{len(FORMATS)} built-in checkpoint formats (docs/formats.md; `layoutc formats NAME` prints one "
             "as a --format-file):"]
    for name in sorted(FORMATS):
        f = FORMATS[name]
        layout = ("fused " + ("gate_up" if f.gate_up else "gate + up") if f.fused else "per-expert") + \
            (", [in, out]" if f.transposed else "") + (", interleaved" if f.gate_up_layout == Word.INTERLEAVE else "")
        layers = f.moe_layers if isinstance(f.moe_layers, str) else list(f.moe_layers)
        lines.append(f"  {name:<13} {layout:<37} moe layers: {layers!s:<22} experts: {f.layer_prefix}{f.experts}"
                     + (f"; shared expert {f.shared_expert}" if f.shared_expert else "")
                     + ("; weight on the input" if f.router_weight == "input" else ""))
    return "\n".join(lines) + "\n"


#: the markers in docs/formats.md between which families_markdown() is pasted
DOC_MARKERS = ("<!-- families: generated by layoutc.tools.checkpoints.formats.families_markdown() -->",
               "<!-- end families -->")


def _layout_words(f: CheckpointFormat) -> str:
    if not f.gated:
        where = f"non-gated {'fused' if f.fused else 'per-expert'} `{f.up}` (up), `{f.down}`"
    elif not f.fused:
        where = f"per-expert `{f.gate}`, `{f.up}`, `{f.down}`"
    elif f.gate_up:
        where = f"fused `{f.gate_up}` ({f.gate_up_layout}), `{f.down}`"
    else:
        where = f"fused `{f.gate}` (gate), `{f.up}` (up), `{f.down}`"
    return where + ("; experts along rows" if f.experts_flattened else "") + \
        ("; w13 `[in, out]`" if f.transposed else "") + ("; w2 `[in, out]`" if f.down_transposed else "")


def _keys_words(f: CheckpointFormat) -> str:
    defaults = {fl.name: fl.default for fl in fields(CheckpointFormat)}
    named = [f"{k} `{', '.join(getattr(f, k))}`" for k in ("num_hidden_layers", "hidden_size", "num_experts",
             "intermediate_size", "top_k", "activation") if getattr(f, k) != defaults[k]]
    if f.fixed_activation:
        named.append(f"activation fixed `{f.fixed_activation}`")
    if f.swiglu:
        named.append(f"swiglu `{', '.join(f.swiglu)}`" + (f" (defaults {f.swiglu_defaults[0]}, "
                     f"{f.swiglu_defaults[1]})" if f.swiglu_defaults else ""))
    return "; ".join(named) or "defaults"


def families_markdown() -> str:
    """The family table of docs/formats.md, generated from FORMATS and GENERIC (a drift test
    holds the page to it): one row per built-in family (where its experts are, their layout,
    which layers are MoE, the config keys it reads under other names, shared expert, where the
    routing weight applies, the transformers experts class) and the generic entry's keys."""
    rows = ["| model_type | experts at | layout | MoE layers | config keys (non-default) | shared expert | "
            "router weight | transformers experts class |", "|---|---|---|---|---|---|---|---|"]
    for name in sorted(FORMATS):
        f = FORMATS[name]
        layers = f.moe_layers if isinstance(f.moe_layers, str) else list(f.moe_layers)
        rows.append(f"| {name} | `{f.layer_prefix}{f.experts}` | {_layout_words(f)} | `{layers}` | "
                    f"{_keys_words(f)}{'; under text_config' if f.text_config else ''} | "
                    f"{f'`{f.shared_expert}`' if f.shared_expert else '-'} | {f.router_weight} | "
                    f"{f'`{f.experts_class}`' if f.experts_class else '-'} |")
    generic = "; ".join(f"{k}: `{', '.join(getattr(GENERIC, k))}`" for k in (
        "num_hidden_layers", "hidden_size", "num_experts", "intermediate_size", "top_k", "activation"))
    return ("\n".join(rows) + f"\n\nThe generic entry (audit, and the proposer's config keys): {generic}; "
            "MoE layers by the generic rule (`moe_layers: \"generic\"`).\n")
