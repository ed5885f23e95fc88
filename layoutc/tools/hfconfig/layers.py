"""How many decoder layers hold routed experts, by each family's rule.

* Nemotron-H: a layer is MoE iff its letter in ``hybrid_override_pattern`` is
  ``E`` (or its entry in ``layers_block_type`` is ``"moe"``).
* Gemma-4: ``enable_moe_block: false`` means no MoE layer.
* Jamba: layer ``i`` is MoE iff ``i % expert_layer_period == expert_layer_offset``
  (HF ``JambaConfig.layers_num_experts``; defaults 2 and 1 where a Jamba config
  leaves them out).
* DeepSeek-V2/V3, GLM-4.5: layer ``i`` is MoE iff ``i >= first_k_dense_replace``
  and ``i % moe_layer_freq == 0`` (HF ``modeling_deepseek``).
* Qwen-MoE: layer ``i`` is MoE iff ``i not in mlp_only_layers`` and
  ``(i + 1) % decoder_sparse_step == 0`` (HF ``modeling_qwen2_moe``).
* Otherwise (Mixtral, gpt-oss, MiniMax, DBRX, OLMoE, Granite, Phi-MoE) every
  layer is MoE.

A model_type that `layoutc run`'s family table (layoutc.tools.checkpoints.formats) declares
with a rule over config keys (Qwen, DeepSeek, Gemma-4, Llama-4, ERNIE-4.5) is counted by
that same rule, so audit and run agree on which layers are MoE.
"""

from __future__ import annotations

from typing import Any

from layoutc.tools.hfconfig.keys import Scopes, check_int, model_type
from layoutc.tools.hfconfig.model import ModelConfigError


def count_moe_layers(scopes: Scopes, num_hidden_layers: int) -> int:
    """Layers holding routed experts (the rules are in the module docstring).

    Records the rule or key used as ``scopes.used["num_moe_layers"]``. Raises
    ModelConfigError on a pattern of the wrong length or type, or a bad period,
    offset, frequency, step or layer list.
    """
    table = _count_from_family_table(scopes, num_hidden_layers)
    if table is not None:
        return table
    pattern_found = scopes.find(("hybrid_override_pattern", "layers_block_type"), "num_moe_layers")
    if pattern_found is not None:
        return _count_from_pattern(scopes, *pattern_found, num_hidden_layers)

    enable = scopes.find(("enable_moe_block",))
    if enable is not None and enable[1] is False:
        scopes.used["num_moe_layers"] = "enable_moe_block = false"
        return 0

    period_found = scopes.find(("expert_layer_period",))
    if period_found is not None or model_type(scopes) == "jamba":
        return _count_jamba(scopes, period_found, num_hidden_layers)
    return _count_dense_first(scopes, num_hidden_layers)


def _count_from_family_table(scopes: Scopes, num_hidden_layers: int) -> int | None:
    """The built-in family's own rule (layoutc.tools.checkpoints.formats, the table `layoutc
    run` loads by), for a model_type the table declares with a rule over config keys; None
    for any other config (the generic rules below then apply)."""
    from layoutc.tools.checkpoints.formats import FORMATS, FormatError, _moe_layers

    # the innermost scope naming a model_type (Gemma-4's text_config: gemma4_text)
    found = next(((scope, scope["model_type"]) for _, scope in scopes.entries
                  if isinstance(scope.get("model_type"), str)), None)
    if found is None:
        return None
    scope, kind = found
    fmt = FORMATS.get(kind)
    if fmt is None or not isinstance(fmt.moe_layers, str) or fmt.moe_layers in ("all", "tensors"):
        return None
    cfg = scope.get("text_config", scope) if fmt.text_config else scope
    if not isinstance(cfg, dict):
        return None
    try:
        layers = _moe_layers(fmt, cfg, num_hidden_layers)
    except FormatError as exc:
        raise ModelConfigError(f"{scopes.source}: {exc}", source=scopes.source, field="num_moe_layers") from None
    rule = f"the {kind} family's rule {fmt.moe_layers!r} (layoutc formats {kind})"
    scopes.used["num_moe_layers"] = (f"every layer (num_hidden_layers; {rule})" if len(layers) == num_hidden_layers
                                     else f"{len(layers)} of num_hidden_layers by {rule}")
    return len(layers)


def _count_from_pattern(scopes: Scopes, alias: str, pattern: Any, num_hidden_layers: int) -> int:
    """Nemotron-H: one letter (or word) per layer; ``E`` (or ``"moe"``) is a MoE layer."""
    source = scopes.source
    if isinstance(pattern, str):
        kinds = list(pattern)
        moe_kind = "E"
    elif isinstance(pattern, list) and all(isinstance(item, str) for item in pattern):
        kinds = list(pattern)
        # A list of letters ("M", "E", "*") or of words ("mamba", "moe").
        moe_kind = "E" if all(len(item) == 1 for item in kinds) else "moe"
    else:
        raise ModelConfigError(
            f"{source}: {alias} = {pattern!r} is neither a string "
            "nor a list of strings",
            source=source,
            field="num_moe_layers",
            aliases=(alias,),
        )
    if len(kinds) != num_hidden_layers:
        raise ModelConfigError(
            f"{source}: {alias} describes {len(kinds)} layers "
            f"but num_hidden_layers is {num_hidden_layers}",
            source=source,
            field="num_moe_layers",
            aliases=(alias,),
        )
    return sum(1 for kind in kinds if kind == moe_kind)


def _count_jamba(scopes: Scopes, period_found: tuple[str, Any] | None, num_hidden_layers: int) -> int:
    """Jamba: layer i is MoE iff i % expert_layer_period == expert_layer_offset (defaults 2, 1)."""
    source = scopes.source
    period = 2 if period_found is None else check_int(
        period_found[1], minimum=1, source=source, field="num_moe_layers", alias=period_found[0])
    offset_found = scopes.find(("expert_layer_offset",))
    offset = 1 if offset_found is None else check_int(
        offset_found[1], minimum=0, source=source, field="num_moe_layers", alias=offset_found[0])
    if offset >= period:
        raise ModelConfigError(
            f"{source}: expert_layer_offset = {offset} must be smaller than expert_layer_period = {period}",
            source=source, field="num_moe_layers", aliases=("expert_layer_offset", "expert_layer_period"))
    scopes.used["num_moe_layers"] = (f"layers i with i % expert_layer_period ({period}) == "
                                     f"expert_layer_offset ({offset})"
                                     + ("" if period_found and offset_found else "; Jamba defaults 2, 1"))
    return sum(1 for layer in range(num_hidden_layers) if layer % period == offset)


def _layer_rule(scopes: Scopes, key: str, *, minimum: int, default: int) -> int:
    """One integer layer rule (``first_k_dense_replace``, ...), ``default`` when absent."""
    found = scopes.find((key,))
    if found is None:
        return default
    return check_int(found[1], minimum=minimum, source=scopes.source, field="num_moe_layers", alias=found[0])


def _dense_only_layers(scopes: Scopes) -> set[int]:
    """Qwen-MoE's ``mlp_only_layers``: layer indices that stay dense."""
    found = scopes.find(("mlp_only_layers",))
    if found is None:
        return set()
    if not isinstance(found[1], list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in found[1]
    ):
        raise ModelConfigError(
            f"{scopes.source}: mlp_only_layers = {found[1]!r} "
            "is not a list of layer indices",
            source=scopes.source,
            field="num_moe_layers",
            aliases=("mlp_only_layers",),
        )
    return set(found[1])


def _count_dense_first(scopes: Scopes, num_hidden_layers: int) -> int:
    """DeepSeek / GLM (first dense layers, a frequency) and Qwen-MoE (a step, dense-only layers);
    every layer when the config states none of these."""
    first_dense = _layer_rule(scopes, "first_k_dense_replace", minimum=0, default=0)
    moe_freq = _layer_rule(scopes, "moe_layer_freq", minimum=1, default=1)
    sparse_step = _layer_rule(scopes, "decoder_sparse_step", minimum=1, default=1)
    dense_only = _dense_only_layers(scopes)
    rules = [key for key, present in (
        ("first_k_dense_replace", first_dense != 0), ("moe_layer_freq", moe_freq != 1),
        ("decoder_sparse_step", sparse_step != 1), ("mlp_only_layers", bool(dense_only))) if present]
    scopes.used["num_moe_layers"] = (f"num_hidden_layers with {', '.join(rules)}" if rules
                                     else "every layer (num_hidden_layers)")
    return sum(
        1
        for layer in range(num_hidden_layers)
        if layer >= first_dense
        and layer % moe_freq == 0
        and (layer + 1) % sparse_step == 0
        and layer not in dense_only
    )
