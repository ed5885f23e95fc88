"""What `layoutc run` and the runners built on it (layoutc.tools.ep_run, layoutc.tools.tp)
share: its error, a module's plan for a checkpoint's layer, and a layer's kernel run."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from layoutc.runtime.interface import ModuleLayout
from layoutc.tools.contract_module import StaleModuleError, layout_of


class RunError(Exception):
    """A tool error of `layoutc run`, printed as `layoutc run: error[<code>]: <message>` (exit 2)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def module_layout(mod: ModuleType) -> ModuleLayout:
    """The generated module's LAYOUT; RunError LR120 for a module compiled by an older layoutc."""
    try:
        return layout_of(mod)
    except StaleModuleError as exc:
        raise RunError("LR120", str(exc)) from None


def checkpoint_plan(mod: ModuleType, moe: Any, tp: int, dtype: str, isa: str) -> Any:
    """`mod.plan(...)` for a checkpoint's layer at TP degree `tp`: the sizes and activation from
    `describe()`'s MoEModelConfig, its swigluoai constants in the contract's thousandths. Raises
    RunError LR131 for a contract parameter a config.json does not give, and the module's
    LayoutContractError when the contract refuses the configuration."""
    values: dict[str, Any] = {"num_experts": moe.num_experts, "hidden_size": moe.hidden_size,
                              "intermediate_size": moe.intermediate_size, "tp_size": tp, "isa": isa,
                              "activation": moe.activation, "dtype": dtype}
    # the model's swigluoai constants, in the contract's thousandths; the contract admits
    # only the kernel's (1702, 7000) and refuses any other with its own rule
    for name, value in (("swiglu_alpha_milli", moe.swiglu_alpha), ("swiglu_limit_milli", moe.swiglu_limit)):
        if value is not None:
            values[name] = round(float(value) * 1000)
    layout = module_layout(mod)
    missing = layout.missing_params(values)
    if missing:
        raise RunError("LR131", f"contract {layout.contract} needs {', '.join(missing)}, which a checkpoint's "
                       "config.json does not give; use a contract with num_experts, hidden_size, "
                       "intermediate_size, tp_size, activation, dtype (and isa)")
    return layout.plan(**layout.plan_arguments(values))


@dataclass
class KernelRun:
    """The all-reduced kernel output of one layer at one TP degree, and what it cost.

    output: [T, H] in the model dtype (the ranks summed in that dtype, as the all-reduce does).
    load_s: slowest rank's alloc + load + prepack (seconds); kernel_s: slowest rank's
    median `fused_moe` time over 3 calls after one warm-up; peak_mib: the largest growth
    of peak RSS over one rank's load, prepack and forward (Linux VmHWM, MiB).
    """

    output: Any
    plan: Any
    load_s: float
    kernel_s: float
    peak_mib: float
