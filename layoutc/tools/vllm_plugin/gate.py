"""vLLM's CPU grouped-GEMM support gate, answered (replace) or explained (check) by the contract.

Hooks, vllm 0.32.0:
- `CPUUnquantizedExperts._supports_grouped_gemm(cls, moe_config) -> (bool, reason)`
  (vllm/model_executor/layers/fused_moe/experts/cpu_moe.py), the classmethod every CPU
  experts class's `is_supported_config` ends in (vec, and the amx/neon/vsx subclasses,
  which inherit it). It refuses a swigluoai shard that is not a multiple of the ISA's
  output alignment, because `_padded_intermediate_size` never pads swigluoai (gpt-oss at
  tp 4: intermediate 2880 -> 720 per rank; the tests' 704 -> 176).
- `select_unquantized_moe_backend(moe_config)` (fused_moe/oracle/unquantized.py), as
  fused_moe/unquantized_fused_moe_method.py and the oracle's own `select_backend` call it:
  it logs each refusal's reason at debug level only, and raises
  NotImplementedError("No Unquantized MoE backend supports the deployment configuration.").

Modes:
- replace: the gate answers with the route's contract (`vllm_cpu_grouped_gemm`'s `plan()`,
  for the class's `isa`): admitted -> (True, None), and the plugin's replace hook pads the
  layer as the contract says (whole swigluoai pairs at the end); refused -> (False, the
  contract's reason).
- check: vLLM's own answer stands; each refusal is recorded with the contract's verdict.
In both modes a NotImplementedError from the selection, after a recorded refusal, becomes
a LayoutcVllmError naming vLLM's real reason and the contract's verdict.
"""

from __future__ import annotations

import functools
from typing import Any

import layoutc.tools.vllm_plugin.check as check
from layoutc.tools.vllm_plugin import relay
from layoutc.tools.vllm_plugin.errors import LayoutcVllmError

_MARK = "__layoutc_vllm_gate__"
# vLLM's generic refusal (oracle/unquantized.py select_unquantized_moe_backend).
GENERIC = "No Unquantized MoE backend supports the deployment configuration."
_REFUSALS: list[str] = []
# The contract `verdict` found for each class (describe names it).
_CONTRACT: dict[Any, str] = {}


def verdict(cls: Any, moe: Any) -> tuple[Any, str | None]:
    """(plan, None) when the grouped-GEMM contract declared for `cls` (vllm_cpu_grouped_gemm's `models`
    lines, check.module) admits `moe` for `cls.isa`, else (None, reason).

    cls: a CPUUnquantizedExperts class (its `isa`); moe: the layer's FusedMoEConfig
    (num_local_experts, in_dtype, ...; check.info_of). The reason names the contract.
    """
    info = check.info_of(moe, name="(backend selection)", num_experts=int(moe.num_local_experts),
                         dtype=moe.in_dtype, isa=str(cls.isa))
    try:
        gen = check.module("grouped_gemm", cls, info)
        _CONTRACT[cls] = gen.CONTRACT
        return check.admit(gen, info), None
    except LayoutcVllmError as exc:
        return None, str(exc)


def describe(plan: Any, contract: str) -> str:
    """`contract`'s admission of `plan` in words: the shard and what it is padded to."""
    i, p = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
    pad = f"pads intermediate_size_per_partition {i} -> {p}" if p != i else f"needs no pad at {i}"
    how = " (whole (gate, up) pairs at the end)" if plan.activation == "swigluoai" and p != i else ""
    return f"contract {contract} admits it and {pad}{how}"


def install(mode: str, cpu_moe: Any) -> None:
    """Wrap the gate and the backend selection for `mode` ("check" | "replace"); idempotent.

    Raises LayoutcVllmError when this vLLM lacks them (not vllm 0.32's layout).
    """
    try:
        from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method
        from vllm.model_executor.layers.fused_moe.oracle import unquantized as oracle
    except ImportError as exc:
        raise LayoutcVllmError(f"layoutc: vLLM's unquantized MoE backend selection cannot be imported "
                               f"({exc}); the plugin is written against vllm 0.32") from exc
    cls = cpu_moe.CPUUnquantizedExperts
    gate = cls.__dict__.get("_supports_grouped_gemm")
    if not isinstance(gate, classmethod) or not hasattr(oracle, "select_unquantized_moe_backend"):
        raise LayoutcVllmError("layoutc: this vLLM has no CPUUnquantizedExperts._supports_grouped_gemm "
                               "classmethod to hook; the plugin is written against vllm 0.32")
    if getattr(gate.__func__, _MARK, False):
        return
    original = gate.__func__

    @functools.wraps(original)
    def supports_grouped_gemm(klass: Any, moe: Any) -> tuple[bool, str | None]:
        ok, reason = original(klass, moe)
        plan, refusal, contract = *verdict(klass, moe), _CONTRACT.get(klass)
        if mode == "replace":
            if plan is not None:
                return True, None
            _REFUSALS.append(f"{klass.__name__}: {refusal}")
            return False, refusal
        if not ok:
            said = describe(plan, contract or "") if plan is not None else refusal
            _REFUSALS.append(f"{klass.__name__}._supports_grouped_gemm refused it: {reason}; {said}")
        return ok, reason

    setattr(supports_grouped_gemm, _MARK, True)
    cls._supports_grouped_gemm = classmethod(supports_grouped_gemm)
    select = _wrap_select(oracle.select_unquantized_moe_backend, mode)
    oracle.select_unquantized_moe_backend = select
    if getattr(method, "select_unquantized_moe_backend", None) is not None:
        method.select_unquantized_moe_backend = select


def _wrap_select(select: Any, mode: str) -> Any:
    @functools.wraps(select)
    def select_unquantized_moe_backend(*args: Any, **kwargs: Any) -> Any:
        with relay.recorded():  # a refusal here stops a worker: relayed to whoever started the engine
            return _explained(select, mode, *args, **kwargs)

    setattr(select_unquantized_moe_backend, _MARK, True)
    return select_unquantized_moe_backend


def _explained(select: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
    """vLLM's selection; its NotImplementedError after a recorded refusal becomes a LayoutcVllmError."""
    _REFUSALS.clear()
    try:
        return select(*args, **kwargs)
    except NotImplementedError as exc:
        if not _REFUSALS:
            raise
        # vLLM calls it as select_unquantized_moe_backend(moe_config=...)
        moe = kwargs["moe_config"] if "moe_config" in kwargs else args[0]
        hint = "; LAYOUTC_VLLM=replace pads it as the contract says" if mode == "check" else ""
        raise LayoutcVllmError(
            f"layoutc: vLLM refuses this MoE layer ({exc}) because " + "; ".join(dict.fromkeys(_REFUSALS))
            + f" [activation {getattr(moe.activation, 'value', moe.activation)}, hidden {moe.hidden_dim}, "
            f"intermediate {moe.intermediate_size} over tp {moe.tp_size}]{hint}") from None


def uninstall(cpu_moe: Any) -> None:
    """Put vLLM's gate and selection back (tests)."""
    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method
    from vllm.model_executor.layers.fused_moe.oracle import unquantized as oracle

    cls = cpu_moe.CPUUnquantizedExperts
    gate = cls.__dict__.get("_supports_grouped_gemm")
    if isinstance(gate, classmethod) and getattr(gate.__func__, _MARK, False):
        setattr(cls, "_supports_grouped_gemm", classmethod(getattr(gate.__func__, "__wrapped__")))  # noqa: B009, B010
    for mod in (oracle, method):
        fn = getattr(mod, "select_unquantized_moe_backend", None)
        if fn is not None and getattr(fn, _MARK, False):
            setattr(mod, "select_unquantized_moe_backend", fn.__wrapped__)  # noqa: B010 (mypy: a module attribute)
    _REFUSALS.clear()


__all__ = ["GENERIC", "describe", "install", "uninstall", "verdict"]
