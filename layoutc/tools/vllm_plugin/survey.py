"""Every MoE layer vLLM built: held to a contract by the plugin, or named as not held, with why.

After vLLM's `process_weights_after_loading(model, ...)` (model_loader/utils.py) the plugin walks
the model: a MoE layer is a module whose `quant_method` is a `FusedMoEMethodBase`
(fused_moe/fused_moe_method_base.py; vLLM 0.32's RoutedExperts holds it), and its experts class
is `quant_method.moe_kernel.fused_experts` (the modular kernel every CPU MoE method builds:
UnquantizedFusedMoEMethod, CompressedTensorsW8A8Int8MoEMethod, ...), or the method's class when
it built none. A layer the hook handled is held; every other one is reported with its class and
the reason (`reason`).

Which contract models which vLLM class: the contracts do not declare it yet (issue 41's
"contracts declare what they model"), so until they do this module's `MODELLED` is that
declaration for the plugin, in this one place (the `source` lines of the contracts cited).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

# The class the plugin hooks (hook.py); its X86/Arm/Power subclasses inherit the hook.
HOOKED = "cpu_moe.CPUUnquantizedExperts"

# vLLM 0.32 CPU experts classes (fused_moe/experts/<module>.py) that a contract models but the plugin
# does not hook yet: "<module>.<class>" -> the contracts (their `source` lines name the class).
MODELLED: dict[str, tuple[str, ...]] = {
    "cpu_moe.CPUExpertsInt8": ("vllm_cpu_int8_moe",),
    "cpu_moe.ArmCPUExpertsInt8": ("vllm_cpu_int8_moe",),
    "cpu_moe.PowerCPUExpertsInt8": ("vllm_cpu_int8_moe",),
    "cpu_moe.CPUExpertsMxfp4": ("vllm_cpu_mxfp4_moe", "vllm_cpu_mxfp4_gpt_oss_moe"),
    "cpu_int4_moe.CPUExpertsInt4": ("vllm_cpu_w4a8_int4_moe",),
}
_MAX_NAMES = 4


def key(cls: type) -> str:
    """`<module>.<class>` of a vLLM experts class: the module's last component (cpu_moe, cpu_int4_moe)."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__qualname__}"


def reason(cls: type) -> str:
    """Why a layer of experts class `cls` is not held (the first class of its MRO the table knows)."""
    for klass in cls.__mro__:
        k = key(klass)
        if k == HOOKED:
            return "the plugin hooks this class, but its hook did not run on this layer"
        if k in MODELLED:
            names = ", ".join(MODELLED[k])
            return f"contract {names} models this class, but the plugin does not hook it yet"
    return "no contract models this class"


@dataclass(frozen=True)
class NotHeld:
    """One MoE layer the plugin did not hold: its name, its experts class (`key`) and why."""

    layer: str
    vllm_class: str
    reason: str


def experts_class(layer: Any) -> type | None:
    """The experts class of a vLLM MoE layer (`quant_method.moe_kernel.fused_experts`, else the
    method's class), or None when `layer` is not a MoE layer (no FusedMoEMethodBase quant_method)."""
    from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase

    method = getattr(layer, "quant_method", None)
    if not isinstance(method, FusedMoEMethodBase):
        return None
    experts = getattr(getattr(method, "moe_kernel", None), "fused_experts", None)
    return type(experts) if experts is not None else type(method)


def not_held(model: Any, held: set[int]) -> list[NotHeld]:
    """The MoE layers of `model` (a torch.nn.Module) whose id is not in `held`, in module order."""
    out: list[NotHeld] = []
    for name, module in model.named_modules():
        cls = experts_class(module)
        if cls is None or id(module) in held:
            continue
        out.append(NotHeld(str(getattr(module, "layer_name", None) or name), key(cls), reason(cls)))
    return out


def by_class(layers: list[NotHeld]) -> str:
    """`ZenCPUExpertsInt8 x2, ...` (the summary line's count of not-held layers by class)."""
    counts = Counter(layer.vllm_class.rsplit(".", 1)[-1] for layer in layers)
    return ", ".join(f"{c} x{n}" for c, n in sorted(counts.items()))


def report(layers: list[NotHeld]) -> list[str]:
    """One line per class: its layers (the first few named) and the reason."""
    lines = []
    for cls in dict.fromkeys(layer.vllm_class for layer in layers):
        mine = [layer for layer in layers if layer.vllm_class == cls]
        names = ", ".join(layer.layer for layer in mine[:_MAX_NAMES])
        more = f" and {len(mine) - _MAX_NAMES} more" if len(mine) > _MAX_NAMES else ""
        what = "layer" if len(mine) == 1 else "layers"
        lines.append(
            f"layoutc: {len(mine)} MoE {what} not held ({names}{more}): vLLM class "
            f"{cls.rsplit('.', 1)[-1]} ({cls}): {mine[0].reason}"
        )
    return lines


__all__ = ["HOOKED", "MODELLED", "NotHeld", "by_class", "experts_class", "key", "not_held", "reason", "report"]
