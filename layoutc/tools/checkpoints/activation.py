"""The activation a family's routed experts compute, clamps included, read from config.json and
held to the activation the contract's glue declares (`GlueInterface.activations`).

`hidden_act` names the activation; a few families change it with further config keys that
transformers' experts module reads (transformers 5.19):

- `swiglu_limit` L: gate clamped above at L and up to [-L, L] before the activation:
  HYV4Experts (hy_v4/modeling_hy_v4.py), DeepseekV4Experts (deepseek_v4), Glm5NextTextExperts
  (glm5_next), and with `swiglu_alpha` GptOssExperts (gpt_oss), MiniMaxM3VLExperts
  (minimax_m3_vl), OpenAIPrivacyFilterExperts (openai_privacy_filter).
- `swiglu_alpha` a: `gate * sigmoid(a * gate)` in place of silu (the same swigluoai families).
- `swiglu_limits` (a list, one entry per layer; 0 or null: none): Step3p7Experts clamps the
  activation's *output* above at the layer's entry, and up to [-L, L] (step3p7).

A key is computed by the contract only where its glue's activation of that name declares the
constant with the same value (`Activation.constants`, in thousandths: gpt-oss's swigluoai
declares swiglu_alpha_milli 1702 and swiglu_limit_milli 7000, as vLLM's kernels fix them).
Any other value, and any key whose meaning layoutc does not know (a name with "swiglu",
"clamp" or "act_limit" in it that no family table above reads), is a RunError LR142 naming
the key: the kernel would compute another function than the model's, and an "ok" from inputs
that never reach the clamp would be false.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layoutc.tools.runplan import RunError

#: config.json key -> (the glue constant that computes it, what transformers computes with it)
CLAMP_KEYS: dict[str, tuple[str, str]] = {
    "swiglu_limit": (
        "swiglu_limit_milli",
        "gate clamped above at L and up to [-L, L] before the activation "
        "(HYV4Experts, DeepseekV4Experts, Glm5NextTextExperts, GptOssExperts)",
    ),
    "swiglu_alpha": ("swiglu_alpha_milli", "gate * sigmoid(alpha * gate) in place of silu (GptOssExperts)"),
    "swiglu_limits": (
        "swiglu_output_limit_milli",
        "the layer's entry clamps the activation's output above and up to [-L, L] (Step3p7Experts)",
    ),
}
#: keys that only a shared (dense) expert reads: the routed output leaves it out (Step3p7MLP)
SHARED_ONLY = frozenset({"swiglu_limits_shared"})
#: substrings of a config key that may change the experts' activation
SUSPECT = ("swiglu", "clamp", "act_limit", "activation_limit", "glu_limit")


def clamp_settings(cfg: Mapping[str, Any], layer: int) -> dict[str, float | None]:
    """The activation settings of `layer` in a parsed config (the MoE settings' dict): key ->
    value (a number), or None for a key whose value layoutc cannot read as one (an unknown
    key, or a value that is not a number). Keys whose value is null or false (a switch that is
    off, e.g. DINOv2's use_swiglu_ffn), and per-layer entries of 0 or null, mean "no clamp" and
    are left out."""
    found: dict[str, float | None] = {}
    for key, value in cfg.items():
        if key in SHARED_ONLY or not any(s in key.lower() for s in SUSPECT) or value is None or value is False:
            continue
        if key == "swiglu_limits":
            entry = value[layer] if isinstance(value, list) and 0 <= layer < len(value) else None
            if entry in (None, 0):
                continue
            value = entry
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        found[key] = float(value) if number and key in CLAMP_KEYS else None
    return found


#: the config keys whose value is a clamp limit (swiglu_alpha is a slope, not a limit)
LIMIT_KEYS = ("swiglu_limit", "swiglu_limits")


def clamp_limits(cfg: Mapping[str, Any], layer: int) -> dict[str, float]:
    """Every clamp limit config.json states for `layer`'s routed experts: key -> |value|.

    Read by name (LIMIT_KEYS: swiglu_limit; swiglu_limits' entry for the layer, 0 or null
    meaning none) whatever SUSPECT says, and any other numeric key SUSPECT matches except
    swiglu_alpha and the shared-only keys (a key LR142 refuses unless taken out). `run`'s
    scaled inputs must reach past the largest of these (reference.input_reach): a clamp the
    inputs never reach cannot show that one side computes it and the other does not.
    cfg: the parsed MoE settings' dict (`MoEModelConfig.text_config`)."""
    found: dict[str, float] = {}
    for key, value in cfg.items():
        named = key in LIMIT_KEYS
        suspect = any(s in key.lower() for s in SUSPECT) and key not in SHARED_ONLY and key != "swiglu_alpha"
        if not (named or suspect):
            continue
        if key == "swiglu_limits":
            value = value[layer] if isinstance(value, list) and 0 <= layer < len(value) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and value != 0:
            found[key] = abs(float(value))
    return found


def check_activation(moe: Any, mod: Any, contract: str, layers: list[int]) -> None:
    """Hold the family's activation settings (config.json, `clamp_settings`) of every layer in
    `layers` to the contract's glue, before anything is loaded.

    moe: `describe()`'s MoEModelConfig (its activation name and config dict `text_config`); mod: the
    generated module (its LAYOUT's kernel glue). Raises RunError LR142 naming the key when the
    glue's activation `moe.activation` does not declare the key's constant at the config's
    value (thousandths), or the key is one layoutc cannot read. A module without a glue, or a
    glue without the activation, is left to the contract's plan(), which refuses it; so is a
    key the family's format hands to plan() as a parameter the contract declares (gpt-oss's
    swiglu_limit -> swiglu_limit_milli, which the contract admits only at the glue's value: LC524).
    """
    from layoutc.tools.runplan import module_layout

    layout = module_layout(mod)
    kernel = layout.kernel
    # a key the format hands to plan() (gpt-oss's swiglu keys -> swiglu_*_milli, runplan.checkpoint_plan)
    # where the contract takes that parameter: plan() refuses another value with the contract's own rule
    planned = {CLAMP_KEYS[k][0] for k in (moe.format.swiglu or ()) if k in CLAMP_KEYS}
    planned &= {p.name for p in layout.plan_params}
    interface = kernel.glue if kernel is not None else None
    act = interface.activation(moe.activation) if interface is not None else None
    if interface is None or act is None:  # no kernel, or not this activation: plan() refuses with its own rule
        return
    constants = dict(act.constants)
    glue, formula = f"glue {interface.kind}", f"computes {act.formula}"
    for layer in layers:
        for key, value in clamp_settings(moe.text_config, layer).items():
            where = f"config.json's {key}" + (f" (layer {layer})" if key == "swiglu_limits" else "")
            if value is None:
                raise RunError(
                    "LR142",
                    f"{where} = {moe.text_config[key]!r} may change what model_type "
                    f"{moe.format.model_type!r}'s experts compute, and layoutc does not know how; "
                    f"contract {contract}'s {glue} {formula}; refusing rather than comparing another "
                    "function",
                )
            constant, meaning = CLAMP_KEYS[key]
            if constant in planned and key in (moe.format.swiglu or ()):
                continue
            if constants.get(constant) != round(value * 1000):
                has = (
                    f"declares {constant} {constants[constant]}" if constant in constants else f"declares no {constant}"
                )
                raise RunError(
                    "LR142",
                    f"{where} = {value:g}: model_type {moe.format.model_type!r}: its experts "
                    f"compute {meaning}, but contract {contract}'s {glue} {formula} and {has} "
                    f"(its {moe.activation} activation); use a contract whose glue computes the clamp",
                )


def non_gated_refusal(moe: Any, mod: Any, contract: str) -> str | None:
    """Why `run` cannot run a family's non-gated experts (`CheckpointFormat.gated` false:
    down(act(up(x))) with no gate, transformers' NemotronHExperts, `has_gate=False`) on contract
    `contract`, or None when the experts are gated.

    Every glue layoutc ships (layoutc.compiler.glues.registry, read from runtime/glue/*.py) declares
    only gated activations, act(gate) * up on a w13 of 2I rows, and so does every kernel they call:
    vLLM 0.32's CPU experts report `_supports_no_act_and_mul()` False
    (vllm/model_executor/layers/fused_moe/experts/cpu_moe.py) and `FusedMoEConfig` refuses
    `is_act_and_mul=False` off CUDA, XPU and ROCm (fused_moe/config.py). The words name the
    glues, read at run time, so a glue that declares a non-gated activation shows here. mod None: a
    quantized checkpoint (layoutc/tools/quant_run), whose runner reads gated experts only.
    The caller raises RunError LR148 with them, before anything is loaded."""
    if moe.format.gated:
        return None
    from layoutc.compiler.glues import registry
    from layoutc.runtime.vocab import ACTIVATIONS
    from layoutc.tools.runplan import module_layout

    kernel = module_layout(mod).kernel if mod is not None else None
    glue = kernel.glue if kernel is not None else None
    takes = sorted(
        kind
        for kind, g in registry().items()
        if any(not ACTIVATIONS[a.name].gated for a in g.interface.activations if a.name in ACTIVATIONS)
    )
    here = (
        f"contract {contract}'s glue {glue.kind} computes only {', '.join(a.formula for a in glue.activations)}"
        if glue is not None
        else f"contract {contract} binds no glue"
        if mod is not None
        else "the quantized runner dequantizes and pads gated experts only"
    )
    others = (
        f"glues declaring a non-gated activation: {', '.join(takes)} (layoutc's loaders fill a gated w13 only)"
        if takes
        else "no glue layoutc ships declares a non-gated activation: vLLM 0.32's CPU experts report "
        "_supports_no_act_and_mul() False (fused_moe/experts/cpu_moe.py) and FusedMoEConfig refuses "
        "is_act_and_mul=False off CUDA, XPU and ROCm (fused_moe/config.py)"
    )
    up, down = moe.format.up, moe.format.down
    return (
        f"model_type {moe.format.model_type!r} has non-gated experts: {down}(act({up}(x))) with "
        f"{moe.hidden_act}{'' if moe.hidden_act == moe.activation else f' ({moe.activation})'} and no gate (its format's gated is false); {here}; {others}. "
        "Nothing was loaded or run"
    )
