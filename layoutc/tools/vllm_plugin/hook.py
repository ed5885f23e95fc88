"""The vLLM side of the plugin: one wrapped method, and the summary line.

Hook: `CPUUnquantizedExperts.process_weights_after_loading(self, layer)` in
vllm 0.32.0 vllm/model_executor/layers/fused_moe/experts/cpu_moe.py, the method
vLLM calls once per unquantized MoE layer on CPU after the weights are loaded
(from UnquantizedFusedMoEMethod._setup_kernel). Its subclasses (X86/Arm/Power)
inherit it, so one assignment covers every ISA. vLLM's method picks the route
(`is_zentorch_moe_supported(layer)`): zentorch (weights left as loaded) or the
grouped GEMM (`_pad_moe_intermediate`, then `cpu_prepack_moe_weight` on both weights).

- check: run vLLM's method unchanged, with a copy of the loaded weights taken
  just before; then hold the result to the route's contract (check.check_layer).
- replace: the route is still vLLM's decision (its own `is_zentorch_moe_supported`);
  admission, padding and prepacking come from the generated module; the prepacked
  weights are installed with vLLM's `replace_parameter`, the w13 bias through
  `.data` (the quant config holds that very Parameter), so `apply()` runs vLLM's
  `_C::cpu_fused_moe` (or zentorch) on them unchanged.

The summary line is logged after vLLM's `process_weights_after_loading(model, ...)`
(vllm/model_executor/model_loader/utils.py, called from base_loader.py) returns: the layers held,
by contract, and every other MoE layer of the model named as not held, by class (survey.py);
strict mode refuses there. A LayoutcVllmError raised in these hooks is recorded for the process
that started the engine (relay.py).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import layoutc.tools.vllm_plugin.check as check
from layoutc.tools.vllm_plugin import declared, ep, gate, int8, posmap, relay, survey
from layoutc.tools.vllm_plugin.errors import LayoutcVllmError

_STATE: dict[str, Any] = {"mode": None, "strict": False, "handled": Counter(), "held": set(), "seconds": 0.0,
                          "engine_seconds": 0.0, "release": None}
_MARK = "__layoutc_vllm__"
# The method wrapped on the experts class (a name: it is replaced on the class at run time).
_HOOKED = "process_weights_after_loading"


def install(mode: str, strict: bool = False) -> None:
    """Wrap vLLM's CPU MoE weight processing for `mode` ("check" | "replace"); idempotent per process.

    strict: after the weights load, refuse (LayoutcVllmError) when a MoE layer is not held (survey.py).
    Raises LayoutcVllmError when this vLLM lacks the hooked method (not vllm 0.32's layout), and when its
    release (`vllm.__version__`) is not one the contracts declare they model (declared.require_release).
    """
    if _STATE["mode"] is not None:
        return
    _STATE["release"] = declared.require_release()
    try:
        from vllm.model_executor.layers.fused_moe.experts import cpu_moe
        from vllm.model_executor.model_loader import base_loader
    except ImportError as exc:
        raise LayoutcVllmError(f"layoutc: LAYOUTC_VLLM={mode} but vLLM's CPU MoE module cannot be "
                               f"imported ({exc}); the plugin is written against vllm 0.32") from exc
    cls = cpu_moe.CPUUnquantizedExperts
    original = cls.__dict__.get(_HOOKED)
    if original is None or not hasattr(base_loader, "process_weights_after_loading"):
        raise LayoutcVllmError("layoutc: this vLLM has no CPUUnquantizedExperts.process_weights_after_loading "
                               "to hook; the plugin is written against vllm 0.32")
    _STATE["mode"], _STATE["strict"] = mode, strict
    if getattr(original, _MARK, False):
        return
    relay.install()
    gate.install(mode, cpu_moe)
    if mode == "replace":
        ep.install(cpu_moe)
    int8.install(_int8_layer)

    @functools.wraps(original)
    def process_weights_after_loading(self: Any, layer: Any) -> None:
        start = time.perf_counter()
        try:
            with relay.recorded():
                if mode == "check":
                    _check(self, layer, original, cpu_moe)
                else:
                    _replace(self, layer, cpu_moe)
            _STATE["held"].add(id(layer))
        finally:
            _STATE["seconds"] += time.perf_counter() - start

    setattr(process_weights_after_loading, _MARK, True)
    setattr(cls, _HOOKED, process_weights_after_loading)

    loader_step = base_loader.process_weights_after_loading

    @functools.wraps(loader_step)
    def after_loading(model: Any, model_config: Any, target_device: Any) -> None:
        before, seconds, engine = Counter(_STATE["handled"]), _STATE["seconds"], _STATE["engine_seconds"]
        try:
            loader_step(model, model_config, target_device)
        finally:
            posmap.drop_spares()  # the snapshot buffers check mode kept from layer to layer
        with relay.recorded():  # strict mode's refusal stops the worker: relayed to whoever started the engine
            _summary(_STATE["handled"] - before, _STATE["seconds"] - seconds,
                     survey.not_held(model, _STATE["held"]), _STATE["engine_seconds"] - engine)

    setattr(after_loading, _MARK, True)
    base_loader.process_weights_after_loading = after_loading


def uninstall() -> None:
    """Put vLLM's own methods back (tests; a process normally keeps the mode it started with)."""
    if _STATE["mode"] is None:
        return
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.model_executor.model_loader import base_loader

    cls = cpu_moe.CPUUnquantizedExperts
    int8.uninstall()
    gate.uninstall(cpu_moe)
    ep.uninstall(cpu_moe)
    relay.uninstall()
    wrapped = cls.__dict__[_HOOKED]
    if getattr(wrapped, _MARK, False):
        setattr(cls, _HOOKED, _unwrap_once(wrapped))
    step = base_loader.process_weights_after_loading
    if getattr(step, _MARK, False):
        base_loader.process_weights_after_loading = _unwrap_once(step)
    _STATE["mode"], _STATE["strict"] = None, False
    _STATE["held"] = set()
    _STATE["handled"] = Counter()
    _STATE["seconds"] = 0.0
    _STATE["engine_seconds"] = 0.0


def _unwrap_once(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function `fn` wraps (`__wrapped__`, set by functools.wraps in `install`); one level
    only, unlike inspect.unwrap, so a wrapper vLLM itself put under ours stays."""
    inner = getattr(fn, "__wrapped__", None)
    if not callable(inner):
        raise LayoutcVllmError(f"layoutc: {fn!r} is marked as layoutc's hook but wraps nothing")
    return inner


def handled() -> dict[str, int]:
    """Layers handled in this process so far, by contract."""
    return dict(_STATE["handled"])


def _summary(handled: Counter[str], seconds: float, missed: list[survey.NotHeld], engine: float = 0.0) -> None:
    """Log the summary line (layers held, by contract; layers not held, by class) and one warning line
    per class not held; in strict mode raise LayoutcVllmError when any layer is not held.

    seconds: wall time in the plugin's hooks; engine: the part of it spent in vLLM's own weight
    processing, which check mode runs inside its hook (0 in replace mode)."""
    from vllm.logger import init_logger

    log = init_logger("vllm.layoutc")
    contracts = ", ".join(f"{c} x{n}" for c, n in sorted(handled.items())) or "none"
    what = "checked vLLM's padding against" if _STATE["mode"] == "check" else "padded and prepacked with"
    lines = survey.report(missed)
    for line in lines:
        log.warning("%s", line)
    missing = f" ({survey.by_class(missed)})" if missed else ""
    # The time includes vLLM's own method in check mode (it runs inside the wrapper): said apart.
    own = f", {1000 * engine:.1f} ms of it in vLLM's own method" if engine > 0 else ""
    log.info("layoutc: mode=%s, contract=%s, layers=%d, not held=%d%s (%s the contract; %.1f ms in layoutc's hook%s; "
             "vLLM %s, held to the contracts modelling vLLM %s)", _STATE["mode"], contracts, sum(handled.values()),
             len(missed), missing, what, 1000 * seconds, own, _STATE.get("release"), ", ".join(declared.releases()))
    if missed and _STATE["strict"]:
        count = f"{len(missed)} MoE layer is" if len(missed) == 1 else f"{len(missed)} MoE layers are"
        raise LayoutcVllmError(f"layoutc: LAYOUTC_VLLM={_STATE['mode']},strict refuses to start: {count} not held "
                               f"by a contract: " + "; ".join(line.removeprefix("layoutc: ") for line in lines))


def layer_info(experts: Any, layer: Any) -> check.LayerInfo:
    """The plan parameters of `layer` as vLLM configured it (FusedMoEConfig of the experts;
    under EP the placement of the layer's ExpertMapManager, fused_moe/expert_map_manager.py;
    swiglu constants the config leaves unset come from the model's hf_config, _swiglu)."""
    manager = getattr(layer, "expert_map_manager", None)
    moe = experts.moe_config
    info = check.info_of(moe, name=str(getattr(layer, "layer_name", None) or type(layer).__name__),
                         num_experts=int(layer.w13_weight.shape[0]), dtype=layer.w13_weight.dtype,
                         isa=str(type(experts).isa),
                         placement=str(getattr(manager, "placement_strategy", None) or "linear"))
    alpha, limit = _swiglu(moe, info.activation)
    return dataclasses.replace(info, swiglu_alpha=alpha, swiglu_limit=limit)


def _swiglu(moe: Any, activation: str) -> tuple[float | None, float | None]:
    """The layer's swiglu constants; where its FusedMoEConfig leaves one unset, the model's (model_swiglu)."""
    alpha, limit = getattr(moe, "swiglu_alpha", None), getattr(moe, "swiglu_limit", None)
    if activation == "swigluoai" and (alpha is None or limit is None):
        model_alpha, model_limit = model_swiglu()
        alpha = model_alpha if alpha is None else alpha
        limit = model_limit if limit is None else limit
    return alpha, limit


def model_swiglu() -> tuple[float | None, float | None]:
    """(alpha, limit) of the served model's swigluoai experts, from its hf_config through the
    family table (layoutc.tools.checkpoints.formats.swiglu_params: gpt-oss's swiglu_limit,
    alpha 1.702); (None, None) outside a vLLM config context or for another family.

    vLLM 0.32's model_executor/models/gpt_oss.py (MLPBlock) builds FusedMoE without
    swiglu_alpha / swiglu_limit, so the layer's FusedMoEConfig does not carry them; the
    model's hf_config does (vllm.config.get_current_vllm_config_or_none().model_config)."""
    from vllm.config import get_current_vllm_config_or_none

    from layoutc.tools.checkpoints.formats import FormatError, swiglu_params

    vllm_config = get_current_vllm_config_or_none()
    hf_config = getattr(getattr(vllm_config, "model_config", None), "hf_config", None)
    if hf_config is None or not hasattr(hf_config, "to_dict"):
        return None, None
    try:
        found = swiglu_params(hf_config.to_dict())
    except FormatError:
        return None, None
    return found if found is not None else (None, None)


def _bias(layer: Any, name: str) -> Any:
    t = getattr(layer, name, None)
    return None if t is None else t.data


def _check(experts: Any, layer: Any, original: Any, cpu_moe: Any) -> None:
    info = layer_info(experts, layer)
    if info.ep_size > 1 and not cpu_moe.is_zentorch_moe_supported(layer):
        held = check.module("grouped_gemm", type(experts), info)  # the contract whose expert map replace applies
        raise LayoutcVllmError(ep.refusal(info.name, info.ep_size, info.num_experts, info.global_experts or 0,
                                          held.CONTRACT))
    # The route vLLM's method is about to take (it asks the same function), so the
    # contract admits the configuration before any kernel sees the weights.
    route = "zentorch" if cpu_moe.is_zentorch_moe_supported(layer) else "grouped_gemm"
    gen = check.module(route, type(experts), info)
    plan = check.admit(gen, info)
    # The grouped-GEMM route's snapshot is the contract's prepacked layout of the loaded weights, written
    # through its position maps (posmap.py): compared word for word after vLLM's method, no pad or prepack.
    snap = check.snapshot(layer.w13_weight.data, layer.w2_weight.data, _bias(layer, "w13_bias"),
                          _bias(layer, "w2_bias"), gen=gen if route == "grouped_gemm" else None, plan=plan)
    start = time.perf_counter()
    try:
        original(experts, layer)
    finally:
        _STATE["engine_seconds"] += time.perf_counter() - start
    took = "zentorch" if getattr(experts, "_use_zentorch", False) else "grouped_gemm"
    if took != route:
        raise LayoutcVllmError(f"layoutc: layer {info.name}: vLLM took the {took} route, not {route} as "
                               f"is_zentorch_moe_supported said; contract {gen.CONTRACT} does not apply")
    check.check_layer(gen, plan, info, snap, layer.w13_weight.data, layer.w2_weight.data,
                      _bias(layer, "w13_bias"), _bias(layer, "w2_bias"), packed=route == "grouped_gemm")
    if snap.packed is not None:  # checked: its buffers serve the next layer's snapshot
        posmap.give_back(*snap.packed)
    _STATE["handled"][gen.CONTRACT] += 1


def _int8_layer(method: Any, layer: Any, original: Any) -> None:
    """The W8A8 int8 method's weight processing (int8.py): vLLM's own, held to the contract that
    declares it models the method's experts class (both modes: those contracts pad nothing). A
    class no contract models runs as vLLM has it, and survey.py names the layer."""
    cls = getattr(method, "experts_cls", None)
    if not isinstance(cls, type) or not int8.holdable(cls) or not declared.lines(cls, declared.release()):
        original(method, layer)  # survey.py names the layer, its class and why
        return
    start = time.perf_counter()
    try:
        with relay.recorded():
            moe = method.moe
            info = check.info_of(moe, name=str(getattr(layer, "layer_name", None) or type(layer).__name__),
                                 num_experts=int(layer.w13_weight.shape[0]), dtype=moe.in_dtype,
                                 isa=str(getattr(cls, "isa", "") or int8.ISA.get(cls.__qualname__, "")))
            alpha, limit = _swiglu(moe, info.activation)
            info = dataclasses.replace(info, swiglu_alpha=alpha, swiglu_limit=limit)
            gen = declared.pick(cls, declared.release(), check.when_params(info), f"layer {info.name}")
            if gen is None:  # unreachable: lines() found some
                raise LayoutcVllmError(f"layoutc: layer {info.name}: no contract models {cls.__qualname__}")
            plan = int8.admit(gen, info)
            want = int8.expected(gen, plan, int8.snapshot(layer))
            seen: list[Any] = []
            if int8.repacks(cls):  # held as the class's own repack gets them (int8.before_repack)

                def held(experts: Any) -> None:
                    int8.check_layer(gen, plan, info, want, layer, experts)
                    seen.append(experts)

                with int8.before_repack(layer, held):
                    original(method, layer)
            else:
                original(method, layer)
            experts = getattr(getattr(method, "moe_kernel", None), "fused_experts", None)
            if type(experts) is not cls:
                raise LayoutcVllmError(f"layoutc: layer {info.name}: vLLM built {type(experts).__qualname__}, not "
                                       f"{cls.__qualname__} as the method chose; contract {gen.CONTRACT} does not apply")
            if int8.repacks(cls):
                if not seen or seen[0] is not experts:
                    raise LayoutcVllmError(
                        f"layoutc: layer {info.name}: vLLM's W8A8 method did not call {cls.__qualname__}."
                        f"process_weights_after_loading (its {int8.REPACKS[cls.__qualname__]} repack), where the "
                        f"plugin holds the layer to contract {gen.CONTRACT}; not checked")
            else:
                int8.check_layer(gen, plan, info, want, layer, experts)
        _STATE["held"].add(id(layer))
        _STATE["handled"][gen.CONTRACT] += 1
    finally:
        _STATE["seconds"] += time.perf_counter() - start


def _replace(experts: Any, layer: Any, cpu_moe: Any) -> None:
    from vllm.model_executor.utils import replace_parameter

    info = layer_info(experts, layer)
    use_zentorch = bool(cpu_moe.is_zentorch_moe_supported(layer))
    route = "zentorch" if use_zentorch else "grouped_gemm"
    gen = check.module(route, type(experts), info)
    plan = check.admit(gen, info)
    experts._use_zentorch = use_zentorch
    layout = check.layout(gen)
    if info.ep_size > 1:
        manager = getattr(layer, "expert_map_manager", None)
        setattr(experts, ep.MAP_ATTR, ep.expert_map(
            layout, plan, int(experts.moe_config.ep_rank), getattr(manager, "expert_map", None), info.name,
            info.num_experts))
    bias13 = layout.tensor("bias", "w13")
    if _bias(layer, "w13_bias") is not None and bias13 is None:
        raise LayoutcVllmError(f"layoutc: layer {info.name}: the layer has a w13 bias, but contract "
                               f"{gen.CONTRACT} declares no `bias w13` tensor")
    try:
        # A short EP rank (E % ep_size != 0) holds one expert fewer than the contract's slots: the spare
        # slot is the contract's fill (ep.with_spare_slots), and the remapped ids never reach it.
        def logical(entry: Any, t: Any) -> Any:
            return ep.with_spare_slots(layout, entry, plan, t) if info.ep_size > 1 else t

        w13 = layout.weight("w13").pad(logical(layout.weight("w13"), layer.w13_weight.data), plan)
        w2 = layout.weight("w2").pad(logical(layout.weight("w2"), layer.w2_weight.data), plan)
        b13 = None if _bias(layer, "w13_bias") is None or bias13 is None else \
            bias13.pad(logical(bias13, _bias(layer, "w13_bias")), plan)
        if not use_zentorch:
            packed13, packed2 = check.kernel(gen).prepack_padded(w13.contiguous(), w2.contiguous(), plan)
            w13, w2 = packed13.data, packed2.data
    except (gen.LayoutContractError, gen.KernelUnavailableError) as exc:
        raise LayoutcVllmError(f"layoutc: layer {info.name}: contract {gen.CONTRACT} cannot pad this "
                               f"layer's weights: {exc}") from None
    if w13 is not layer.w13_weight.data:
        replace_parameter(layer, "w13_weight", w13)
    if w2 is not layer.w2_weight.data:
        replace_parameter(layer, "w2_weight", w2)
    if b13 is not None and b13 is not layer.w13_bias.data:
        # Through .data: the quant config built before this holds this Parameter (experts.w1_bias).
        layer.w13_bias.data = b13
    _STATE["handled"][gen.CONTRACT] += 1


__all__ = ["LayoutcVllmError", "handled", "install", "layer_info", "uninstall"]
