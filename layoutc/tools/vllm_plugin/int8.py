"""W8A8 int8 MoE layers: vLLM's compressed-tensors int8 method, held to the contract of its experts class.

Hook: `CompressedTensorsW8A8Int8MoEMethod.process_weights_after_loading(self, layer)` (vllm 0.32.0
model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/
compressed_tensors_moe_w8a8_int8.py), called once per MoE layer after the checkpoint is loaded.
The method's `experts_cls` (chosen in its `__init__` by oracle/int8.py `select_int8_moe_backend`)
is the vLLM class the contract must model (declared.py). The method reorders w13 for
`ZenCPUExpertsInt8` + swigluoai, converts the weights for the backend, and builds the modular
kernel, whose ZenCPUExpertsInt8 experts keep their own float32 copies of the scales (`_w1_scale_f32`,
`_w2_scale_f32`) and bfloat16 copies of the biases (`_w1_bias_bf16`, `_w2_bias_bf16`): what
`zentorch_fused_moe` reads (`KERNEL_COPIES`).

Both modes run vLLM's method unchanged and hold what it leaves to the contract: every tensor
of the layer the contract declares (weights, scales, biases) has the plan's shape and equals the
contract's `load` of the loaded tensor (a copy taken just before; the loader's rows are
[gate | up] halves, vllm's `_load_w13`) with the contract's dtype, and so do the copies the kernel reads;
the weights zentorch reads as they are must be contiguous (`CONTIGUOUS`). The
contracts of these classes pad and prepack nothing, so replace mode has nothing of layoutc's to
install: it checks, as check does. A class no contract models is left to vLLM (survey.py names it).

A class that repacks the weights in its own `process_weights_after_loading` (`REPACKS`: CPUExpertsInt8,
`_C::convert_weight_packed`, cpu_moe.py) is held BEFORE that repack: the W8A8 method calls
`moe_kernel.fused_experts.process_weights_after_loading(layer)` last, and the plugin's wrapper of the
class's method (`install`) holds the layer's tensors, as the method hands them to the repacking op, to
the contract, then runs vLLM's repack unchanged. The packed (VNNI) result is the op's, not modelled.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from layoutc.runtime import algebra
from layoutc.runtime.interface import TensorEntry
from layoutc.tools.vllm_plugin import check
from layoutc.tools.vllm_plugin.errors import LayoutcVllmError

_MARK = "__layoutc_vllm_int8__"
_HOOKED = "process_weights_after_loading"
# The layer's parameter of each contract role (create_weights of the compressed-tensors method).
PARAMS = {
    "weight w13": "w13_weight",
    "scale w13": "w13_weight_scale",
    "bias w13": "w13_bias",
    "weight w2": "w2_weight",
    "scale w2": "w2_weight_scale",
    "bias w2": "w2_bias",
}
# The copies an experts class hands its kernel in place of the layer's tensors, by class then role: (attribute,
# dtype). vllm 0.32.0 cpu_moe.py ZenCPUExpertsInt8.__init__ makes them (`w1_scale.to(float32).reshape(E, -1)`,
# `w1_bias.to(bfloat16)`, each `.contiguous()`; a bias copy is None when the layer has no bias) and its apply()
# passes all four to `zentorch_fused_moe`, never the layer's scales or biases.
KERNEL_COPIES: dict[str, dict[str, tuple[str, torch.dtype]]] = {
    "ZenCPUExpertsInt8": {
        "scale w13": ("_w1_scale_f32", torch.float32),
        "scale w2": ("_w2_scale_f32", torch.float32),
        "bias w13": ("_w1_bias_bf16", torch.bfloat16),
        "bias w2": ("_w2_bias_bf16", torch.bfloat16),
    }
}
# The layer tensors an experts class's apply() hands its kernel as they are, which the kernel requires contiguous:
# ZenCPUExpertsInt8.apply passes w1/w2 (the layer's w13_weight/w2_weight) to `zentorch_fused_moe`, whose
# zentorch_group_matmul refuses a non-contiguous weight at the first forward ("weight[0] must be contiguous",
# libzentorch.so; measured on vllm 0.32.0 + zentorch, tests/tools/test_redteam43.py).
CONTIGUOUS = {"ZenCPUExpertsInt8": ("weight w13", "weight w2")}
# Experts classes (cpu_moe.py) whose own process_weights_after_loading repacks w13/w2, by the op it calls
# (vllm 0.32.0 CPUExpertsInt8.process_weights_after_loading: `torch.ops._C.convert_weight_packed`).
REPACKS = {"CPUExpertsInt8": "_C::convert_weight_packed"}
# The plan's `isa` of a class with no `isa` attribute: CPUExpertsInt8._supports_current_device asks for x86 with AMX
# tiles (`torch.cpu._is_amx_tile_supported()`), the `when isa == amx` of its contract's `models` line.
ISA = {"CPUExpertsInt8": "amx"}
_REPACK_MARK = "__layoutc_vllm_int8_repack__"
# id(layer) -> the check to run on entry to the experts' repack (set by `before_repack`).
_PENDING: dict[int, Callable[[Any], None]] = {}


def holdable(cls: type) -> bool:
    """Whether layers of experts class `cls` can be held here: a CPU class vLLM's int8 backend picks from
    (oracle/int8.py `backend_to_kernel_cls(Int8MoeBackend.CPU)`) that leaves the layer's weights as the
    W8A8 method processed them (its `process_weights_after_loading` is the modular kernel's base no-op,
    modular_kernel.py FusedMoEExperts), or a `REPACKS` class, held before its repack (`before_repack`).
    The Arm/Power classes (prepack_moe_weight_int8) repack too and are not held yet."""
    import vllm.model_executor.layers.fused_moe.modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.oracle import int8 as oracle

    base = getattr(mk.FusedMoEExperts, _HOOKED, None)
    if cls not in oracle.backend_to_kernel_cls(oracle.Int8MoeBackend.CPU):
        return False
    return getattr(cls, _HOOKED, None) is base or repacks(cls)


def repacks(cls: type) -> bool:
    """Whether `cls` is a `REPACKS` class from vLLM's cpu_moe.py (its own method repacks the weights)."""
    return cls.__qualname__ in REPACKS and cls.__module__.endswith(".experts.cpu_moe") and _HOOKED in cls.__dict__


@contextlib.contextmanager
def before_repack(layer: Any, held: Callable[[Any], None]) -> Iterator[None]:
    """Within the block, the first call of a `REPACKS` class's `process_weights_after_loading(layer)` runs
    `held(experts)` first (the layer's tensors as the repacking op is about to get them); then vLLM's repack."""
    _PENDING[id(layer)] = held
    try:
        yield
    finally:
        _PENDING.pop(id(layer), None)


def _repack_classes() -> list[type]:
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    return [c for c in (getattr(cpu_moe, n, None) for n in REPACKS) if isinstance(c, type) and _HOOKED in c.__dict__]


def method_class() -> type:
    """vLLM's compressed-tensors W8A8 int8 MoE method class (LayoutcVllmError when this vLLM has none)."""
    try:
        from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
            compressed_tensors_moe_w8a8_int8 as ct,
        )
    except ImportError as exc:
        raise LayoutcVllmError(
            f"layoutc: vLLM's compressed-tensors W8A8 int8 MoE method cannot be imported "
            f"({exc}); the plugin is written against vllm 0.32"
        ) from exc
    cls = getattr(ct, "CompressedTensorsW8A8Int8MoEMethod", None)
    if cls is None or _HOOKED not in cls.__dict__:
        raise LayoutcVllmError(
            "layoutc: this vLLM has no CompressedTensorsW8A8Int8MoEMethod."
            "process_weights_after_loading to hook; the plugin is written against vllm 0.32"
        )
    return cls


def install(on_layer: Any) -> None:
    """Wrap the method's `process_weights_after_loading`: `on_layer(method, layer, original)` runs in
    its place (hook.py: finds the contract, snapshots, runs `original`, checks). Idempotent."""
    cls = method_class()
    original = cls.__dict__[_HOOKED]
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def process_weights_after_loading(self: Any, layer: Any) -> None:
        on_layer(self, layer, original)

    setattr(process_weights_after_loading, _MARK, True)
    setattr(cls, _HOOKED, process_weights_after_loading)
    for klass in _repack_classes():
        _wrap_repack(klass)


def _wrap_repack(klass: type) -> None:
    repack = klass.__dict__[_HOOKED]
    if getattr(repack, _REPACK_MARK, False):
        return

    @functools.wraps(repack)
    def process_weights_after_loading(self: Any, layer: Any) -> None:
        held = _PENDING.pop(id(layer), None)
        if held is not None:
            held(self)
        repack(self, layer)

    setattr(process_weights_after_loading, _REPACK_MARK, True)
    setattr(klass, _HOOKED, process_weights_after_loading)


def uninstall() -> None:
    """Put vLLM's methods back (tests)."""
    cls = method_class()
    fn = cls.__dict__[_HOOKED]
    if getattr(fn, _MARK, False):
        setattr(cls, _HOOKED, fn.__wrapped__)
    for klass in _repack_classes():
        repack = klass.__dict__[_HOOKED]
        if getattr(repack, _REPACK_MARK, False):
            setattr(klass, _HOOKED, repack.__wrapped__)
    _PENDING.clear()


def snapshot(layer: Any) -> dict[str, torch.Tensor]:
    """Detached copies of the layer's tensors, by role (`PARAMS`), as the loader left them."""
    out = {}
    for role, name in PARAMS.items():
        t = getattr(layer, name, None)
        if t is not None:
            out[role] = t.detach().clone()
    return out


def admit(gen: ModuleType, info: check.LayerInfo) -> Any:
    """The contract's plan for the layer (check.admit; the layer's activation dtype is the plan's dtype)."""
    return check.admit(gen, info)


def expected(gen: ModuleType, plan: Any, snap: dict[str, torch.Tensor]) -> dict[str, tuple[TensorEntry, torch.Tensor]]:
    """What the contract makes of the loaded tensors, by role: each declared tensor's `alloc` then `load`
    of the rank's loaded shard (the plan at tp 1 over the shard's intermediate size; the source in the
    loader's [gate | up] halves). A role the layer has but the contract does not declare is refused."""
    lay = check.layout(gen)
    shard = lay.replan(plan, tp_size=1, intermediate_size=int(plan.intermediate_size_per_partition))
    out: dict[str, tuple[TensorEntry, torch.Tensor]] = {}
    for role, loaded in snap.items():
        kind, projection = role.split()
        entry = lay.tensor(kind, projection)
        if entry is None:
            raise LayoutcVllmError(
                f"layoutc: the layer has a {role} ({PARAMS[role]}), but contract "
                f"{lay.contract} declares no `{role}` tensor"
            )
        dst = entry.alloc(shard, 0)
        try:
            entry.load(dst, loaded, shard, 0, source_layout=algebra.Word.HALVES.value)
        except gen.LayoutContractError as exc:
            raise LayoutcVllmError(
                f"layoutc: contract {lay.contract} cannot lay out the loaded {PARAMS[role]}: {exc}"
            ) from None
        out[role] = (entry, dst)
    return out


def check_layer(
    gen: ModuleType,
    plan: Any,
    info: check.LayerInfo,
    want: dict[str, tuple[TensorEntry, torch.Tensor]],
    layer: Any,
    experts: Any,
) -> None:
    """Hold the tensors vLLM left on `layer` (and the copies `experts` hands its kernel, `KERNEL_COPIES`) to `want`.

    Each must have the plan's shape (`shapes(plan)[1]`), the contract's dtype, and equal the contract's tensor
    bit for bit (NaN matches NaN); a kernel copy must exist and equal the contract's tensor converted as the
    class converts it (its `KERNEL_COPIES` dtype); a `CONTIGUOUS` weight must be contiguous. Raises
    LayoutcVllmError naming layoutc, the layer, the tensor (or copy attribute), the experts, the dtype or the
    rows, what they hold, what the contract puts there and the contract line.
    """
    cls = type(experts).__qualname__
    copies = KERNEL_COPIES.get(cls, {})
    for role, (entry, exp) in want.items():
        name = PARAMS[role]
        param = getattr(layer, name, None)
        actual = None if param is None else param.data
        _hold(gen, plan, info, entry, exp, actual, name)
        assert actual is not None  # _hold refuses a missing tensor
        if role in CONTIGUOUS.get(cls, ()) and not actual.is_contiguous():
            raise LayoutcVllmError(
                f"layoutc: layer {info.name}: {name} is not contiguous (strides {tuple(actual.stride())}), "
                f"but {cls}.apply hands it to its kernel as it is and zentorch::zentorch_fused_moe requires contiguous "
                f"weights (it refuses it at the first forward); {check.tensor_line(gen, entry)}"
            )
        if role not in copies:
            continue
        attr, dtype = copies[role]
        label = f"{name} (as {cls} hands it to the kernel, {attr})"
        copy = getattr(experts, attr, None)
        if not isinstance(copy, torch.Tensor):
            raise LayoutcVllmError(
                f"layoutc: layer {info.name}: {cls} holds no {attr} (it has {type(copy).__name__}), the copy of "
                f"{name} its apply() hands zentorch::zentorch_fused_moe, but contract {gen.CONTRACT} declares {role}; "
                f"{check.tensor_line(gen, entry)}"
            )
        got = copy.reshape(exp.shape) if copy.numel() == exp.numel() else copy
        _hold(gen, plan, info, entry, exp.to(dtype), got, label)


def _hold(
    gen: ModuleType,
    plan: Any,
    info: check.LayerInfo,
    entry: TensorEntry,
    exp: torch.Tensor,
    actual: torch.Tensor | None,
    label: str,
) -> None:
    if actual is None:
        raise LayoutcVllmError(
            f"layoutc: layer {info.name}: vLLM left no {label}, but contract {gen.CONTRACT} "
            f"declares it; {check.tensor_line(gen, entry)}"
        )
    check._check_shape(gen, plan, info, entry, actual, label=label, verb="lays it out as")
    if actual.dtype != exp.dtype:
        raise LayoutcVllmError(
            f"layoutc: layer {info.name}: {label} has dtype {str(actual.dtype).removeprefix('torch.')}, but "
            f"contract {gen.CONTRACT} stores it as {str(exp.dtype).removeprefix('torch.')}; "
            f"{check.tensor_line(gen, entry)}"
        )
    if not check._same(exp, actual):
        text = check._message(gen, plan, info, entry, exp, actual, exp, packed=False)
        raise LayoutcVllmError(text.replace(f": {entry.name} is not laid out", f": {label} is not laid out", 1))


__all__ = [
    "CONTIGUOUS",
    "ISA",
    "KERNEL_COPIES",
    "PARAMS",
    "REPACKS",
    "admit",
    "before_repack",
    "check_layer",
    "expected",
    "holdable",
    "install",
    "method_class",
    "repacks",
    "snapshot",
    "uninstall",
]
