"""What the family table knows beyond tensor names: the config keys of the generic entry
and the rules that say which decoder layers are MoE (issue 24 item 1: one table).

`layoutc.tools.checkpoints.formats.FORMATS` declares each built-in family and its `GENERIC`
entry takes its config keys from `GENERIC_KEYS`; `layoutc run` (formats.describe), the TP
runner (layoutc.tools.tp.checkpoint, through describe), `layoutc audit`
(layoutc.tools.hfconfig.layers and .keys) and the proposer (propose.py) all read these, so
there is no second copy. Standard library only.

A layer rule maps (a config's keys, the number of decoder layers) to the MoE layer
indices and a short description of what decided it (audit prints it as the source of
`num_moe_layers`). Each rule is read from the decoder layer of the transformers 5.19 model
that defines it, cited in `MOE_LAYER_RULES`' docstrings. A bad key raises FormatError LR102.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from layoutc.tools.checkpoints.errors import FormatError

#: The generic entry's config keys, per quantity, tried in order (first non-null wins).
#: `moe_topk` (Hunyuan) and `moe_k` (ERNIE-4.5) are aliases of the experts per token.
GENERIC_KEYS: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("num_hidden_layers", "n_layers", "num_layers"),
    "hidden_size": ("hidden_size", "d_model"),
    "intermediate_size": ("moe_intermediate_size", "intermediate_size", "ffn_hidden_size", "expert_ffn_hidden_size"),
    "num_experts": ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"),
    "top_k": ("num_experts_per_tok", "moe_top_k", "top_k_experts", "num_experts_per_token",
              "experts_per_token", "moe_topk", "moe_k"),
    # mlp_hidden_act first: Nemotron-H also has mamba_hidden_act; the MLP's is the experts'.
    "activation": ("mlp_hidden_act", "hidden_act", "hidden_activation", "ffn_act_fn"),
}

Rule = Callable[[Mapping[str, Any], int], tuple[tuple[int, ...], str]]


def config_int(cfg: Mapping[str, Any], key: str, default: int, minimum: int = 0) -> int:
    """cfg[key] as an int >= `minimum`, `default` when absent or null; FormatError LR102 otherwise."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FormatError("LR102", f"config.json: {key} must be an integer >= {minimum}, got {value!r}")
    return value


def layer_list(cfg: Mapping[str, Any], key: str, layers: int) -> list[int]:
    """cfg[key] as a list of layer indices in 0..layers-1 ([] when absent); LR102 otherwise."""
    listed = cfg.get(key) or []
    if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                                               for i in listed):
        raise FormatError("LR102", f"config.json: {key} = {listed!r} must be a list of layer indices in "
                          f"0..{layers - 1}")
    return listed


def _all(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """Every layer (Mixtral, gpt-oss, DBRX, OLMoE, ...)."""
    return tuple(range(layers)), "every layer (num_hidden_layers)"


def _sparse_step(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """Qwen2/3-MoE (Qwen2MoeDecoderLayer): `(i + 1) % decoder_sparse_step == 0`, minus `mlp_only_layers`."""
    step = config_int(cfg, "decoder_sparse_step", 1, minimum=1)
    dense = set(layer_list(cfg, "mlp_only_layers", layers))
    return (tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0),
            f"decoder_sparse_step {step}, mlp_only_layers {sorted(dense)}")


def _first_dense(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """DeepSeek-V2/V3, GLM-4.5 (DeepseekV3DecoderLayer): `i >= first_k_dense_replace` and
    `i % moe_layer_freq == 0`."""
    first = config_int(cfg, "first_k_dense_replace", 0)
    freq = config_int(cfg, "moe_layer_freq", 1, minimum=1)
    return (tuple(i for i in range(first, layers) if i % freq == 0),
            f"first_k_dense_replace {first}, moe_layer_freq {freq}")


def _enable(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """Gemma-4 (Gemma4TextDecoderLayer): every layer iff `enable_moe_block`."""
    on = bool(cfg.get("enable_moe_block"))
    return (tuple(range(layers)) if on else ()), f"enable_moe_block = {str(on).lower()}"


def _listed(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """Llama-4 (Llama4TextDecoderLayer): `layer_idx in moe_layers`, else every
    `interleave_moe_layer_step`-th layer (Llama4TextConfig)."""
    if cfg.get("moe_layers") is not None:
        return tuple(sorted(set(layer_list(cfg, "moe_layers", layers)))), "the moe_layers list"
    step = config_int(cfg, "interleave_moe_layer_step", 1, minimum=1)
    return tuple(range(step - 1, layers, step)), f"interleave_moe_layer_step {step}"


def _interval(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """ERNIE-4.5-MoE (Ernie4_5_MoeDecoderLayer): `(i + 1) % moe_layer_interval == 0` and
    `moe_layer_start_index <= i <= moe_layer_end_index`."""
    interval = config_int(cfg, "moe_layer_interval", 1, minimum=1)
    start = config_int(cfg, "moe_layer_start_index", 0)
    end = config_int(cfg, "moe_layer_end_index", layers - 1)
    return (tuple(i for i in range(layers) if (i + 1) % interval == 0 and start <= i <= end),
            f"moe_layer_interval {interval} within {start}..{end}")


def _period(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """Jamba (JambaConfig.layers_num_experts): `i % expert_layer_period == expert_layer_offset`
    (defaults 2, 1 where the config leaves them out)."""
    period = config_int(cfg, "expert_layer_period", 2, minimum=1)
    offset = config_int(cfg, "expert_layer_offset", 1)
    if offset >= period:
        raise FormatError("LR102", f"config.json: expert_layer_offset = {offset} must be smaller than "
                          f"expert_layer_period = {period}")
    defaults = "" if "expert_layer_period" in cfg and "expert_layer_offset" in cfg else "; Jamba defaults 2, 1"
    return (tuple(i for i in range(layers) if i % period == offset),
            f"layers i with i % expert_layer_period ({period}) == expert_layer_offset ({offset}){defaults}")


def _dense_first_layers(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """LFM2-MoE (Lfm2MoeDecoderLayer): the first `num_dense_layers` layers are dense."""
    first = min(layers, config_int(cfg, "num_dense_layers", 0))
    return tuple(range(first, layers)), f"num_dense_layers {first}"


def _pattern(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """Nemotron-H (NemotronHConfig): one letter per layer in `hybrid_override_pattern`, `E` a
    MoE layer; or `layers_block_type` entries, `"moe"` (or `"E"`) a MoE layer."""
    key = "hybrid_override_pattern" if cfg.get("hybrid_override_pattern") is not None else "layers_block_type"
    pattern = cfg.get(key)
    if isinstance(pattern, str):
        kinds, moe = list(pattern), "E"
    elif isinstance(pattern, list) and all(isinstance(k, str) for k in pattern):
        kinds = list(pattern)
        moe = "E" if all(len(k) == 1 for k in kinds) else "moe"
    else:
        raise FormatError("LR102", f"config.json: {key} = {pattern!r} is neither a string nor a list of strings")
    if len(kinds) != layers:
        raise FormatError("LR102", f"config.json: {key} describes {len(kinds)} layers but num_hidden_layers "
                          f"is {layers}")
    return tuple(i for i, k in enumerate(kinds) if k == moe), key


def pattern_length(cfg: Mapping[str, Any]) -> int | None:
    """The decoder layers a Nemotron-H config states by its per-layer pattern alone: transformers 5's
    NemotronHConfig computes `num_hidden_layers` from `layers_block_type` (a property, not saved to
    config.json; configuration_nemotron_h.py), older configs spell `hybrid_override_pattern`. None
    when neither is a string or list."""
    for key in ("layers_block_type", "hybrid_override_pattern"):
        value = cfg.get(key)
        if isinstance(value, (str, list)) and value:
            return len(value)
    return None


#: The rules a format's `moe_layers` may name ("tensors" and explicit lists are in formats.py).
MOE_LAYER_RULES: dict[str, Rule] = {
    "all": _all, "decoder_sparse_step": _sparse_step, "first_k_dense_replace": _first_dense,
    "enable_moe_block": _enable, "moe_layers": _listed, "moe_layer_interval": _interval,
    "expert_layer_period": _period, "num_dense_layers": _dense_first_layers, "layer_pattern": _pattern,
}

#: The generic entry's rule ("generic"): the first rule whose config keys are present decides;
#: the Qwen and DeepSeek rules combine (a layer is MoE when both say so); else every layer.
GENERIC_LAYER_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("layer_pattern", ("hybrid_override_pattern", "layers_block_type")),
    ("enable_moe_block", ("enable_moe_block",)),
    ("expert_layer_period", ("expert_layer_period", "expert_layer_offset")),
    ("moe_layer_interval", ("moe_layer_interval", "moe_layer_start_index", "moe_layer_end_index")),
    ("num_dense_layers", ("num_dense_layers",)),
    ("moe_layers", ("moe_layers", "interleave_moe_layer_step")),
)
#: model types whose config may leave its rule's keys out (defaults apply): Jamba's 2, 1
GENERIC_BY_MODEL_TYPE = {"jamba": "expert_layer_period"}


def generic_moe_layers(cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """The MoE layers by GENERIC_LAYER_RULES (module docstring), with what decided them."""
    for rule, keys in GENERIC_LAYER_RULES:
        if any(cfg.get(k) is not None for k in keys):
            return MOE_LAYER_RULES[rule](cfg, layers)
    by_type = GENERIC_BY_MODEL_TYPE.get(str(cfg.get("model_type")))
    if by_type is not None:
        return MOE_LAYER_RULES[by_type](cfg, layers)
    first, first_how = _first_dense(cfg, layers)
    step, step_how = _sparse_step(cfg, layers)
    defaults: dict[str, Any] = {"first_k_dense_replace": 0, "moe_layer_freq": 1, "decoder_sparse_step": 1,
                                "mlp_only_layers": []}
    present = [k for k, d in defaults.items() if cfg.get(k) is not None and cfg.get(k) != d]
    if not present:
        return tuple(range(layers)), "every layer (num_hidden_layers)"
    both = tuple(sorted(set(first) & set(step)))
    return both, f"num_hidden_layers with {', '.join(present)} ({first_how}; {step_how})"


def moe_layers_by_rule(rule: str, cfg: Mapping[str, Any], layers: int) -> tuple[tuple[int, ...], str]:
    """The MoE layers by the named rule ("generic" or a key of MOE_LAYER_RULES); FormatError
    LR103 for an unknown rule, LR102 for a bad config key."""
    if rule == "generic":
        return generic_moe_layers(cfg, layers)
    fn = MOE_LAYER_RULES.get(rule)
    if fn is None:
        raise FormatError("LR103", f"unknown moe_layers rule {rule!r}; rules: generic, tensors, "
                          f"{', '.join(MOE_LAYER_RULES)}, or a list of layer indices")
    return fn(cfg, layers)


def swiglu_values(cfg: Mapping[str, Any], keys: tuple[str, str],
                  defaults: tuple[float, float] | None) -> tuple[float, float, str]:
    """(alpha, limit, where from) of a swigluoai family: the config's keys, else the family's
    defaults (gpt-oss: transformers GptOssConfig's swiglu_alpha = 1.702 and swiglu_limit = 7.0,
    which GptOssExperts reads; the released configs state only swiglu_limit). FormatError LR102 when a key is missing without a default, or not a
    finite number."""
    out: list[float] = []
    where: list[str] = []
    for i, key in enumerate(keys):
        value: Any = cfg
        for part in key.split("."):  # a dotted key reads a sub-object (a proposal's "text_config.swiglu_alpha")
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            if defaults is None:
                raise FormatError("LR102", f"config.json has no {key} (swigluoai) and the family has no default")
            out.append(defaults[i])
            where.append(f"{key} default {defaults[i]}")
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
                or value in (float("inf"), float("-inf")):
            raise FormatError("LR102", f"config.json: {key} = {value!r} is not a finite number")
        out.append(float(value))
        where.append(key)
    return out[0], out[1], ", ".join(where)
