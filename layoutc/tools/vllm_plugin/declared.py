"""Which contract holds a vLLM class, and which vLLM releases the plugin holds: the contracts' own
`models` declarations (layoutc.runtime.models over the generated package), never a table here.

A contract states the engine object it stands for, per release, optionally under a condition over
its `plan()` parameters (`models vllm {"0.32.0"} "vllm...cpu_moe:CPUExpertsInt8" when isa == amx`).
A vLLM class is modelled by the lines naming it or, failing that, the nearest class of its MRO a line
names (vLLM's X86/Arm/Power experts subclasses inherit their base's weight processing).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from layoutc.tools.contract_module import import_contract_module
from layoutc.tools.vllm_plugin.errors import LayoutcVllmError

ENGINE = "vllm"


def release() -> str:
    """The running vLLM's release (`vllm.__version__`, a local part such as `+cpu` dropped)."""
    import vllm

    return str(getattr(vllm, "__version__", "unknown")).partition("+")[0]


# The modules of the vLLM objects the plugin holds: hook.install wraps cpu_moe.CPUUnquantizedExperts (and so its
# X86/Arm/Power subclasses), int8.holdable admits only the classes oracle/int8.py backend_to_kernel_cls(CPU)
# returns (all in cpu_moe.py), and int8.install wraps the compressed-tensors W8A8 int8 method. A `models vllm`
# line naming anything else (a GPU class: flashinfer_utils, trtllm_*, marlin_moe...) models a release the
# plugin never sees built, so it does not admit that release here.
HELD_MODULES = (
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe",
    "vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe.compressed_tensors_moe_w8a8_int8",
)


def releases() -> tuple[str, ...]:
    """Every vLLM release some contract models a class the plugin holds in (`HELD_MODULES`), in version order."""
    from layoutc.runtime import models
    from layoutc.runtime.interface import release_key

    found = {r for d in models.modelling(ENGINE) if d.entry.module in HELD_MODULES for r in d.entry.releases}
    return tuple(sorted(found, key=release_key))


def require_release() -> str:
    """The running vLLM's release, when a contract models one of the classes the plugin holds in it
    (`releases`); else LayoutcVllmError naming the release and the releases those contracts model (the
    plugin holds the engine to those only; a release only GPU classes' contracts model is refused)."""
    running, held = release(), releases()
    if running not in held:
        raise LayoutcVllmError(
            f"layoutc: vLLM {running} is not a release any contract of a class the plugin holds models (the "
            f"`models vllm` lines of vLLM's CPU MoE experts and W8A8 int8 method name {', '.join(held) or 'none'}); "
            f"the plugin holds vLLM to those releases only: install one, or unset LAYOUTC_VLLM"
        )
    return running


def lines(cls: type, release_: str | None = None) -> tuple[Any, ...]:
    """The `models vllm` lines (any `when`) naming `cls` or a class of its MRO (in MRO order), as
    layoutc.runtime.models.Declared records; `release_`: only lines modelling that release."""
    from layoutc.runtime import models

    found: list[Any] = []
    for klass in cls.__mro__:
        try:
            target = models.target_of(klass)
        except TypeError:
            continue
        found.extend(models.modelling(ENGINE, target, release_))
    return tuple(found)


def contracts(cls: type, release_: str | None = None) -> tuple[str, ...]:
    """The contracts (names, in declaration order, once each) with a line modelling `cls`."""
    return tuple(dict.fromkeys(d.contract for d in lines(cls, release_)))


def pick(
    cls: type, release_: str, params: dict[str, Any], who: str, forward_op: str | None = None
) -> ModuleType | None:
    """The generated module of the one contract whose line models `cls` (or a base) in `release_` with
    its `when` holding under `params` (plan() parameters of the layer) and, given `forward_op`, whose glue
    runs that op (the kernel vLLM's route calls: one class may take either of two routes); where that
    leaves several, those whose enum and set parameters' declared domains hold the layer's values
    (`_by_domains`). A single contract is returned even outside its domains: its plan() then refuses the
    layer naming the rule. None when no line names the class.

    Raises LayoutcVllmError when lines name the class but none (or more than one contract) applies,
    naming the lines and their conditions; `who` (the layer) leads the message.
    """
    found = lines(cls, release_)
    if not found:
        return None
    applying: dict[str, Any] = {}
    for d in found:
        try:
            holds = d.entry.applies(params)
        except LookupError as exc:  # interface.ConditionError: a `when` reads a parameter the layer lacks
            raise LayoutcVllmError(f"layoutc: {who}: {d.where}: {exc}") from None
        if holds and d.contract not in applying:
            gen = import_contract_module(d.module.rpartition(".")[2])
            if forward_op is None or dict(getattr(gen, "OPS", {}) or {}).get("forward") == forward_op:
                applying[d.contract] = gen
    if len(applying) > 1:  # lines without `when` that split a class by their parameters' domains
        applying = _by_domains(applying, params)
    if len(applying) != 1:
        shown = "; ".join(f"{d.where}: {d.entry}" for d in found)
        op = f" running {forward_op}" if forward_op else ""
        what = f"none{op} applies" if not applying else f"{len(applying)} contracts apply ({', '.join(applying)})"
        raise LayoutcVllmError(
            f"layoutc: {who}: vLLM class {cls.__qualname__} is modelled by {shown}, but "
            f"{what} to this layer ({_params(params)})"
        )
    return next(iter(applying.values()))


def _by_domains(candidates: dict[str, ModuleType], params: dict[str, Any]) -> dict[str, ModuleType]:
    """`candidates` narrowed, parameter by parameter, to the contracts whose declared enum or set domain
    holds the layer's value, where some candidate's does: a line without `when` models its class inside
    its contract's parameter domains (vllm_zen_cpu_int8_moe: silu, gelu, gelu_tanh; its swigluoai sibling:
    swigluoai). A value no candidate holds (float32 for both) narrows nothing: plan() refuses it, naming
    the rule."""
    for name, value in params.items():
        shown = value if isinstance(value, (bool, int)) else str(value).rpartition(".")[2].lower()
        holding = {c: gen for c, gen in candidates.items() if _holds(gen, name, shown)}
        if holding:
            candidates = holding
    return candidates


def _holds(gen: ModuleType, name: str, value: Any) -> bool:
    """Whether contract module `gen` declares parameter `name` with an enum or set domain holding `value`
    (a parameter it does not declare, or declares as a range, holds any value here)."""
    for param in getattr(getattr(gen, "LAYOUT", None), "plan_params", ()):
        if param.name == name and param.kind in ("enum", "set"):
            return value in param.values
    return True


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={getattr(v, 'value', v)}" for k, v in params.items())


__all__ = ["ENGINE", "HELD_MODULES", "contracts", "lines", "pick", "release", "releases", "require_release"]
