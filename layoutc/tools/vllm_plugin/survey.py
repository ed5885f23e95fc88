"""Every MoE layer vLLM built: held to a contract by the plugin, or named as not held, with why.

After vLLM's `process_weights_after_loading(model, ...)` (model_loader/utils.py) the plugin walks
the model: a MoE layer is a module whose `quant_method` is a `FusedMoEMethodBase`
(fused_moe/fused_moe_method_base.py; vLLM 0.32's RoutedExperts holds it), and its experts class
is `quant_method.moe_kernel.fused_experts` (the modular kernel every CPU MoE method builds:
UnquantizedFusedMoEMethod, CompressedTensorsW8A8Int8MoEMethod, ...), or the method's class when
it built none. A layer the hook handled is held; every other one is reported with its class and
the reason (`reason`).

Which contract models which vLLM class is what the contracts declare (`models vllm` lines, read
through declared.py), never a table here. The plugin holds two families of classes: the unquantized
CPU experts (hook.py) and the int8 experts of vLLM's W8A8 method, held as it leaves them or, for
CPUExpertsInt8, just before its own repack (int8.holdable); a class a contract models but the plugin
holds in neither way is named as such.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

# The class the plugin hooks (hook.py); its X86/Arm/Power subclasses inherit the hook.
HOOKED = "cpu_moe.CPUUnquantizedExperts"
_MAX_NAMES = 4


def key(cls: type) -> str:
    """`<module>.<class>` of a vLLM experts class: the module's last component (cpu_moe, cpu_int4_moe)."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__qualname__}"


def hooked(cls: type) -> bool:
    """Whether the plugin holds layers of experts class `cls` when a contract models it: the unquantized
    CPU experts (and subclasses), and the int8 experts int8.holdable names (CPUExpertsInt8: before its repack)."""
    from layoutc.tools.vllm_plugin import int8

    return any(key(klass) == HOOKED for klass in cls.__mro__) or int8.holdable(cls)


def reason(cls: type) -> str:
    """Why a layer of experts class `cls` is not held: no contract declares it models the class (in the
    running vLLM release), or one does and the plugin does not hold the class, or its hook did not run."""
    from layoutc.tools.vllm_plugin import declared

    names = declared.contracts(cls, declared.release())
    if not names:
        return "no contract models this class"
    if hooked(cls):
        return f"contract {', '.join(names)} models this class, but the plugin's hook did not run on this layer"
    return f"contract {', '.join(names)} models this class, but the plugin does not hook it yet"


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


__all__ = ["HOOKED", "NotHeld", "by_class", "experts_class", "hooked", "key", "not_held", "reason", "report"]
