"""How many decoder layers hold routed experts: the family table's layer rules.

The rules are not declared here. A model_type that `layoutc run`'s family table
(layoutc.tools.checkpoints.formats.FORMATS) declares with a rule over config keys (Qwen,
DeepSeek, Gemma-4, Llama-4, ERNIE-4.5) is counted by that rule; any other config by the
table's generic rule (layoutc.tools.checkpoints.families.GENERIC_LAYER_RULES: a
Nemotron-H layer pattern, Gemma-4's enable_moe_block, Jamba's period and offset, ERNIE's
interval, LFM2's dense first layers, a Llama-4 list, else DeepSeek's first dense layers
combined with Qwen's sparse step and dense-only layers; every layer when none is stated).
So audit and run agree on which layers are MoE.

Keys are looked up scope by scope as every other field (keys.Scopes: sub-configs before
the top level, a null counts as absent).
"""

from __future__ import annotations

from typing import Any

from layoutc.tools.checkpoints.errors import ModelConfigError
from layoutc.tools.hfconfig.keys import Scopes


def merged_scopes(scopes: Scopes) -> dict[str, Any]:
    """One dict of every scope's non-null keys, the innermost scope winning (Scopes.find's order):
    the layer rules' input, and the settings dict of the model-config record (`text_config`)."""
    out: dict[str, Any] = {}
    for _, scope in reversed(scopes.entries):
        out.update({k: v for k, v in scope.items() if v is not None})
    return out


def moe_layers(scopes: Scopes, num_hidden_layers: int) -> tuple[int, ...]:
    """The indices of the layers holding routed experts, ascending, by the family table (the
    module docstring).

    Records the rule or key used as ``scopes.used["num_moe_layers"]``. Raises
    ModelConfigError (naming the config) on a pattern of the wrong length or type, or a bad
    period, offset, frequency, step or layer list (the table's FormatError LR102).
    """
    from layoutc.tools.checkpoints.families import generic_moe_layers, moe_layers_by_rule
    from layoutc.tools.checkpoints.formats import FORMATS, FormatError

    # the innermost scope naming a model_type (Gemma-4's text_config: gemma4_text)
    found = next(((scope, scope["model_type"]) for _, scope in scopes.entries
                  if isinstance(scope.get("model_type"), str)), None)
    fmt = FORMATS.get(found[1]) if found is not None else None
    try:
        if fmt is not None and isinstance(fmt.moe_layers, str) and fmt.moe_layers not in ("all", "tensors"):
            assert found is not None
            scope, kind = found
            cfg = scope.get("text_config", scope) if fmt.text_config else scope
            layers, how = moe_layers_by_rule(fmt.moe_layers, cfg if isinstance(cfg, dict) else {},
                                             num_hidden_layers)
            rule = f"the {kind} family's rule {fmt.moe_layers!r} (layoutc formats {kind}: {how})"
            scopes.used["num_moe_layers"] = (f"every layer (num_hidden_layers; {rule})"
                                             if len(layers) == num_hidden_layers
                                             else f"{len(layers)} of num_hidden_layers by {rule}")
            return tuple(layers)
        layers, how = generic_moe_layers(merged_scopes(scopes), num_hidden_layers)
    except FormatError as exc:
        message = str(exc).split(": ", 2)[-1]
        raise ModelConfigError(f"{scopes.source}: {message}", source=scopes.source,
                               field="num_moe_layers") from None
    scopes.used["num_moe_layers"] = how
    return tuple(layers)
