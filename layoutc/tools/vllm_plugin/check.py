"""Hold one vLLM MoE layer's processed weights to its layoutc contract (torch only, no vllm).

The vLLM side (hook.py) hands over plain tensors: the logical weights as the
loader left them (`Snapshot`, taken just before vLLM pads) and the tensors vLLM
ended with. Everything the check expects comes from the LAYOUT of the route's generated
module, its tensors looked up by role (`weight w13`, `weight w2`, `bias w13`, `bias w2`):
`plan()` (admission, padded sizes), each tensor's `shapes` and `pad` (where the live rows
go and the pad code) and, for the grouped-GEMM route, `prepack` through the real
`_C::prepack_moe_weight`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from layoutc.runtime import algebra
from layoutc.runtime.interface import KernelEntry, ModuleLayout, TensorEntry
from layoutc.tools.contract_module import (
    NoKernelError,
    StaleModuleError,
    kernel_of,
    layout_of,
)
from layoutc.tools.vllm_plugin import posmap
from layoutc.tools.vllm_plugin.errors import LayoutcVllmError
from layoutc.tools.vllm_plugin.posmap import padded_axis

# The kernel op each CPU route of vLLM 0.32 calls for an unquantized MoE layer
# (experts/cpu_moe.py CPUUnquantizedExperts.process_weights_after_loading and apply): the contract of
# a route is the one that declares it models the layer's experts class and whose glue runs this op.
ROUTE_OPS = {"grouped_gemm": "_C::cpu_fused_moe", "zentorch": "zentorch::zentorch_fused_moe"}
# The n axis of the w13 weight and bias holds these segments, in this order (the contracts'
# `gate | up`); keyed by the tensor's role (TensorEntry.role).
_SEGMENTS = {"weight w13": ("gate", "up"), "bias w13": ("gate", "up"), "scale w13": ("gate", "up")}
_MAX_RUNS = 6
# Experts the check pads and prepacks at a time (check_layer; at gemma-4's real width, tp 2: 8 x 2.1 MiB
# per expert of w13 and w2, padded and packed, against 0.75 GiB a copy of the layer's).
BLOCK_EXPERTS = 8
_MAX_ROWS = 512


@dataclass(frozen=True)
class LayerInfo:
    """What the plan needs from one vLLM MoE layer, and its name for messages.

    name: the layer's vLLM name (RoutedExperts.layer_name); num_experts: local
    experts (w13's dim 0); hidden_size; intermediate_size: the full (unsharded)
    intermediate size; tp_size; activation: MoEActivation value ("silu", ...);
    dtype: the weights' torch dtype; isa: the experts class's `isa` ("vec", "amx", ...).
    swiglu_alpha / swiglu_limit: the layer's FusedMoEConfig constants (None: unset, and vLLM's
    swigluoai then runs with its defaults 1.702 and 7.0).
    ep_size / expert_placement / global_experts: expert parallelism (vLLM's
    `enable_expert_parallel`: FusedMoEConfig.ep_size, the ExpertMapManager's placement
    strategy, FusedMoEConfig.num_experts); ep_size 1 without EP.
    """

    name: str
    num_experts: int
    hidden_size: int
    intermediate_size: int
    tp_size: int
    activation: str
    dtype: torch.dtype
    isa: str
    swiglu_alpha: float | None = None
    swiglu_limit: float | None = None
    ep_size: int = 1
    expert_placement: str = "linear"
    global_experts: int | None = None


def info_of(moe: Any, *, name: str, num_experts: int, dtype: torch.dtype, isa: str,
            placement: str = "linear") -> LayerInfo:
    """The LayerInfo of a vLLM `FusedMoEConfig` (read by attribute; no vllm import).

    moe: the layer's FusedMoEConfig (fused_moe/config.py: hidden_dim, intermediate_size,
    tp_size, activation, swiglu_alpha/limit, ep_size, num_experts); num_experts: the
    rank's local experts; placement: "linear" | "round_robin" (used under EP only).
    """
    activation = getattr(moe.activation, "value", moe.activation)
    ep_size = int(getattr(moe, "ep_size", 1) or 1)
    return LayerInfo(
        name=name, num_experts=num_experts, hidden_size=int(moe.hidden_dim),
        intermediate_size=int(moe.intermediate_size), tp_size=int(moe.tp_size),
        activation=str(activation).lower(), dtype=dtype, isa=isa,
        swiglu_alpha=getattr(moe, "swiglu_alpha", None), swiglu_limit=getattr(moe, "swiglu_limit", None),
        ep_size=ep_size, expert_placement=str(placement),
        global_experts=int(moe.num_experts) if ep_size > 1 else None)


@dataclass(frozen=True)
class Snapshot:
    """What check mode keeps of the loaded tensors before vLLM's method replaces them.

    w13 / w2: copies of the logical weights ([E, 2*I_pp, H], [E, H, I_pp]); None where `packed`
    holds them instead. w13_bias / w2_bias: copies of the biases, or None. packed: the grouped-GEMM
    route's expectation, the loaded weights written straight into the contract's prepacked order
    through each projection's position map (posmap.expected; (w13, w2), contiguous, the padded
    shapes), with the maps; None where the contract's prepack has no position map (the check then
    pads and prepacks the logical copies, `_packed_blocks_equal`).
    """

    w13: torch.Tensor | None
    w2: torch.Tensor | None
    w13_bias: torch.Tensor | None
    w2_bias: torch.Tensor | None
    packed: tuple[torch.Tensor, torch.Tensor] | None = None
    maps: tuple[Any, Any] | None = None

    def logical(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(w13, w2) as loaded: the copies, or read back from `packed` through the maps (posmap.logical_of)."""
        if self.w13 is not None and self.w2 is not None:
            return self.w13, self.w2
        assert self.packed is not None and self.maps is not None
        return posmap.logical_of(self.maps[0], self.packed[0]), posmap.logical_of(self.maps[1], self.packed[1])


def module(route: str, cls: type, info: LayerInfo) -> ModuleType:
    """The generated module of the contract that declares it models experts class `cls` (or a base) in
    the running vLLM release, under the layer's parameters (`models ... when isa == vec`), and whose
    glue runs `route`'s op (ROUTE_OPS: "grouped_gemm" | "zentorch"); declared.pick reads the lines.

    Raises LayoutcVllmError when no contract (or more than one) applies, or the module has no LAYOUT
    this layoutc reads (compiled by an older layoutc)."""
    from layoutc.tools.vllm_plugin import declared

    params = when_params(info)
    gen = declared.pick(cls, declared.release(), params, f"layer {info.name}", ROUTE_OPS[route])
    if gen is None:
        raise LayoutcVllmError(f"layoutc: layer {info.name}: no contract declares it models vLLM class "
                               f"{cls.__qualname__} (a `models vllm` line); the plugin holds it to none")
    layout(gen)
    return gen


def when_params(info: LayerInfo) -> dict[str, Any]:
    """The plan() parameters of a layer that a `models ... when` condition may read."""
    params: dict[str, Any] = dict(num_experts=info.num_experts, hidden_size=info.hidden_size,
                                  intermediate_size=info.intermediate_size, tp_size=info.tp_size,
                                  activation=info.activation, dtype=info.dtype, ep_size=info.ep_size)
    if info.isa:
        params["isa"] = info.isa
    return params


def layout(gen: ModuleType) -> ModuleLayout:
    """The module's LAYOUT; LayoutcVllmError naming layoutc when it has none this layoutc reads."""
    try:
        return layout_of(gen)
    except StaleModuleError as exc:
        raise LayoutcVllmError(f"layoutc: {exc}") from None


def kernel(gen: ModuleType) -> KernelEntry:
    """The module's kernel functions; LayoutcVllmError when its contract binds no glue."""
    try:
        return kernel_of(layout(gen))
    except NoKernelError as exc:
        raise LayoutcVllmError(f"layoutc: {exc}") from None


def tensor_line(gen: ModuleType, tensor: TensorEntry) -> str:
    """`contracts/<c>.moe:<line>` of `tensor`'s declaration (its LAYOUT entry's contract line)."""
    return layout(gen).where(tensor)


def admit(gen: ModuleType, info: LayerInfo) -> Any:
    """`plan(...)` for the layer; LayoutcVllmError naming layoutc, the layer and the contract line if refused."""
    params: dict[str, Any] = dict(num_experts=info.num_experts, hidden_size=info.hidden_size,
                                  intermediate_size=info.intermediate_size, tp_size=info.tp_size,
                                  activation=info.activation, dtype=info.dtype)
    lay = layout(gen)
    if info.ep_size > 1:  # the plan takes the global experts and places them (local_num_experts)
        if lay.param("ep_size") is None:
            raise LayoutcVllmError(f"layoutc: layer {info.name}: vLLM runs it with expert parallelism "
                                   f"(ep_size {info.ep_size}), but contract {gen.CONTRACT} states none")
        params.update(num_experts=info.global_experts, ep_size=info.ep_size,
                      expert_placement=info.expert_placement)
    if lay.param("isa") is not None:  # the grouped GEMM's kernel variant
        params["isa"] = info.isa
    if info.activation == "swigluoai" and lay.param("swiglu_limit_milli") is not None:
        # the contract admits only the kernel's fixed constants, and refuses a model with others
        params["swiglu_alpha_milli"] = round(1000 * (info.swiglu_alpha if info.swiglu_alpha is not None else 1.702))
        params["swiglu_limit_milli"] = round(1000 * (info.swiglu_limit if info.swiglu_limit is not None else 7.0))
    try:
        return lay.plan(**params)
    except gen.LayoutContractError as exc:
        raise LayoutcVllmError(f"layoutc: layer {info.name}: contract {gen.CONTRACT} does not admit this "
                               f"configuration: {exc}") from None


def snapshot(w13: torch.Tensor, w2: torch.Tensor, w13_bias: torch.Tensor | None, w2_bias: torch.Tensor | None,
             *, gen: ModuleType | None = None, plan: Any = None) -> Snapshot:
    """Detached copies of the loaded tensors (one layer's MoE weights of memory, briefly).

    gen / plan: the grouped-GEMM route's contract and the layer's plan: the weights are then copied
    straight into the contract's prepacked order through its position maps (posmap.py; one strided
    copy, no pad or prepack), where the contract has them; otherwise (and on the zentorch route) as
    loaded."""
    def copy(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach().clone()

    if gen is not None and plan is not None:
        maps = (posmap.position_map(gen, plan, "w13", w13.dtype), posmap.position_map(gen, plan, "w2", w2.dtype))
        if maps[0] is not None and maps[1] is not None and _logical_shapes_fit(maps, w13, w2):
            packed = (posmap.expected(maps[0], w13.detach()), posmap.expected(maps[1], w2.detach()))
            return Snapshot(None, None, copy(w13_bias), copy(w2_bias), packed=packed, maps=(maps[0], maps[1]))
    return Snapshot(w13.detach().clone(), w2.detach().clone(), copy(w13_bias), copy(w2_bias))


def _logical_shapes_fit(maps: tuple[Any, Any], w13: torch.Tensor, w2: torch.Tensor) -> bool:
    """Whether the loaded weights have the logical shapes the maps' live runs read (else the logical
    copies are kept, and check_layer's shape check names what is wrong)."""
    for pm, t in zip(maps, (w13, w2), strict=True):
        if t.dim() != 3 or not t.is_contiguous() or t.shape[0] != pm.shape[0]:
            return False
        want = list(pm.shape)
        want[pm.dim] = sum(length for _, _, length in pm.copies)
        if list(t.shape) != want or any(src + length > t.shape[pm.dim] for src, _, length in pm.copies):
            return False
    return True


def check_layer(gen: ModuleType, plan: Any, info: LayerInfo, snap: Snapshot, w13: torch.Tensor, w2: torch.Tensor,
                w13_bias: torch.Tensor | None, w2_bias: torch.Tensor | None, *, packed: bool) -> None:
    """Check the tensors vLLM left on the layer against the contract's plan.

    w13 / w2: the layer's weights after processing: prepacked by `_C::prepack_moe_weight`
    when `packed` (grouped-GEMM route), plain otherwise (zentorch route). Each must have
    the plan's padded shape, and equal what the contract makes of the snapshot
    (each tensor's `pad`, then `prepack` when packed): every live row where the contract puts
    it, every pad position holding its pad code. Raises LayoutcVllmError naming
    layoutc, the layer, the tensor, the rows and the contract line.
    """
    lay = layout(gen)
    via_map = snap.packed is not None and packed
    if snap.packed is not None:  # compared through the position maps: no logical copies were kept
        for entry, actual in ((lay.weight("w13"), w13), (lay.weight("w2"), w2)):
            _check_shape(gen, plan, info, entry, actual)
        biases = _pairs(lay, {("bias", "w13"): (w13_bias, snap.w13_bias), ("bias", "w2"): (w2_bias, snap.w2_bias)})
        for entry, actual, _ in biases:
            _check_shape(gen, plan, info, entry, actual)
        if packed and _same_block(snap.packed[0], w13) and _same_block(snap.packed[1], w2):
            for entry, actual, logical in biases:
                want = entry.pad(logical, plan)
                if not _same(want, actual):
                    raise LayoutcVllmError(_message(gen, plan, info, entry, want, actual, logical, packed=False))
            return
        logical13, logical2 = snap.logical()  # a difference: described from the loaded weights
        snap = Snapshot(logical13, logical2, snap.w13_bias, snap.w2_bias)
    assert snap.w13 is not None and snap.w2 is not None
    pairs = _pairs(lay, {("weight", "w13"): (w13, snap.w13), ("weight", "w2"): (w2, snap.w2),
                         ("bias", "w13"): (w13_bias, snap.w13_bias), ("bias", "w2"): (w2_bias, snap.w2_bias)})
    for entry, actual, _ in pairs:
        _check_shape(gen, plan, info, entry, actual)
    rest = pairs
    # (after a position-map difference, straight to the whole layer: it both confirms and describes it)
    if packed and not via_map and _packed_blocks_equal(gen, plan, info, snap, w13, w2):
        rest = [pair for pair in pairs if pair[0].kind == "bias"]
        for entry, actual, logical in rest:
            want = entry.pad(logical, plan)
            if not _same(want, actual):
                raise LayoutcVllmError(_message(gen, plan, info, entry, want, actual, logical, packed=False))
        return
    # a difference (or a plan the blocks cannot take): the whole layer, for the message
    expected = {entry.role: entry.pad(logical, plan) for entry, _, logical in pairs}
    if packed:
        p13, p2 = kernel(gen).prepack(snap.w13, snap.w2, plan)
        for projection, want_packed, actual, logical in (("w13", p13.data, w13, snap.w13),
                                                          ("w2", p2.data, w2, snap.w2)):
            if not _same(want_packed, actual):
                entry = lay.weight(projection)
                found = _unpack(gen, plan, projection, actual)
                raise LayoutcVllmError(_message(gen, plan, info, entry, expected[entry.role], found, logical,
                                                packed=True))
        rest = [pair for pair in pairs if pair[0].kind == "bias"]
    for entry, actual, logical in rest:
        if not _same(expected[entry.role], actual):
            raise LayoutcVllmError(_message(gen, plan, info, entry, expected[entry.role], actual, logical,
                                            packed=False))
    if via_map:  # never passed on the pad and prepack alone: the map and the contract disagree
        raise LayoutcVllmError(f"layoutc: layer {info.name}: vLLM's prepacked weights differ from what contract "
                               f"{gen.CONTRACT}'s position map makes of the loaded weights, but not from its pad "
                               f"and prepack: the map (layoutc/tools/vllm_plugin/posmap.py) is wrong; "
                               f"{tensor_line(gen, lay.weight('w13'))}")


def _check_shape(gen: ModuleType, plan: Any, info: LayerInfo, entry: TensorEntry, actual: torch.Tensor,
                 label: str | None = None, verb: str = "pads it to") -> None:
    """The plan's padded shape of `entry` (named `label`, default its tensor name), or LayoutcVllmError
    naming the rows per segment ("contract C {verb} (shape)")."""
    want = tuple(entry.shapes(plan)[1])
    if tuple(actual.shape) != want:
        raise LayoutcVllmError(
            f"layoutc: layer {info.name}: {label or entry.name} has shape {tuple(actual.shape)}, but contract "
            f"{gen.CONTRACT} {verb} {want} (intermediate_size_per_partition "
            f"{plan.intermediate_size_per_partition} -> {plan.intermediate_size_per_partition_padded})"
            f"{_shape_rows(entry, plan, tuple(actual.shape), want)}; {tensor_line(gen, entry)}")


def _packed_blocks_equal(gen: ModuleType, plan: Any, info: LayerInfo, snap: Snapshot, w13: torch.Tensor,
                         w2: torch.Tensor) -> bool:
    """Whether vLLM's prepacked `w13` / `w2` equal the contract's pad then `prepack_padded` of the
    snapshot, computed BLOCK_EXPERTS experts at a time into buffers reused for every block (the
    contract's plan for that many experts, `replan`): the same comparison as over the whole layer,
    every element of both weights, since `_C::prepack_moe_weight` re-blocks each expert on its own
    (tests/tools/test_vllm_plugin.py holds the blocked prepack equal to the whole one). Holds only a
    block's padded and packed copies, where the whole-layer comparison made two padded copies of
    the layer and a packed one. False at the first block that differs, or when the plan cannot be
    taken a block at a time (expert parallelism, a contract that refuses the block's size): the
    caller then compares the whole layer and describes what differs."""
    experts = int(w13.shape[0])
    if info.ep_size > 1 or experts == 0 or snap.w13 is None or snap.w2 is None:
        return False
    block = next(b for b in range(min(BLOCK_EXPERTS, experts), 0, -1) if experts % b == 0)
    lay = layout(gen)
    try:
        sub = lay.replan(plan, num_experts=block)
    except gen.LayoutContractError:
        return False
    e13, e2 = lay.weight("w13"), lay.weight("w2")
    pad13, pad2 = (torch.empty(tuple(e.shapes(sub)[1]), dtype=info.dtype) for e in (e13, e2))
    out13, out2 = torch.empty_like(pad13), torch.empty_like(pad2)
    prepack = kernel(gen).prepack_padded
    for lo in range(0, experts, block):
        part = slice(lo, lo + block)
        e13.pad(snap.w13[part], sub, out=pad13)
        e2.pad(snap.w2[part], sub, out=pad2)
        prepack(pad13, pad2, sub, out=(out13, out2))
        if not (_same_block(out13, w13[part]) and _same_block(out2, w2[part])):
            return False
    return True


def _same_block(a: torch.Tensor, b: torch.Tensor) -> bool:
    """`_same`, first tried as 8-byte words where both are contiguous and whole words (3x faster than a
    bf16 compare here); anything else is left to `_same`, which compares the bits element by element."""
    words = a.shape == b.shape and a.dtype == b.dtype and a.is_contiguous() and b.is_contiguous() \
        and a.numel() > 0 and (a.numel() * a.element_size()) % 8 == 0
    if words and torch.equal(a.reshape(-1).view(torch.int64), b.reshape(-1).view(torch.int64)):
        return True
    return _same(a, b)


def _shape_rows(entry: TensorEntry, plan: Any, got: tuple[int, ...], want: tuple[int, ...]) -> str:
    """Where a wrong shape is wrong: the experts (dim 0 of every MoE tensor; one shape holds for all of
    them, so every expert the tensor holds) and, on the contract's padded axis, the rows (or columns)
    per segment vLLM has against the contract's, and how many more or fewer that is."""
    experts = "" if not got or not want or got[0] != want[0] else f", in {_experts(list(range(got[0])), got[0])}"
    where = padded_axis(entry, plan)
    if where is None or len(got) != len(want):
        return experts
    dim, axis = where
    unit = "columns" if len(want) == 3 and dim == 2 else "rows"
    segs = max(int(axis.segments), 1)
    if got[dim] == want[dim] or got[dim] % segs:
        return experts
    per, pad = got[dim] // segs, int(axis.padded) - int(axis.logical)
    extra = per - int(axis.padded)
    return (f"{experts}: axis {axis.name} ({axis.layout}) holds {segs} x {per} {unit} where the contract puts "
            f"{segs} x {axis.padded} ({axis.logical} live + {pad} pad), {abs(extra)} {unit} of pad "
            f"{'too many' if extra > 0 else 'too few'} per segment")


def _pairs(lay: ModuleLayout, tensors: dict[tuple[str, str], tuple[torch.Tensor | None, torch.Tensor | None]]
           ) -> list[tuple[TensorEntry, torch.Tensor, torch.Tensor]]:
    """(the contract's tensor, vLLM's tensor, the loaded logical tensor) of each role (kind,
    projection) where the layer has both; LayoutcVllmError when the contract declares none."""
    out: list[tuple[TensorEntry, torch.Tensor, torch.Tensor]] = []
    for (kind, projection), (actual, logical) in tensors.items():
        if actual is None and logical is not None and lay.tensor(kind, projection) is not None:
            # loaded, declared by the contract, and gone after vLLM's processing: the kernel never reads it
            raise LayoutcVllmError(f"layoutc: the layer loaded a {kind} of {projection}, which contract "
                                   f"{lay.contract} declares (`{kind} {projection}`), but vLLM's processed layer no "
                                   f"longer holds it: the kernel would run without it")
        if actual is None or logical is None:
            continue
        entry = lay.tensor(kind, projection)
        if entry is None:
            raise LayoutcVllmError(f"layoutc: the layer has a {kind} of {projection}, but contract "
                                   f"{lay.contract} declares no `{kind} {projection}` tensor")
        out.append((entry, actual, logical))
    return out


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and bits, word for word: a pad code is proved as bytes (docs/verification.md),
    so -0.0 for 0.0, or another NaN payload, in a pad or a live position is a difference."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() and a.element_size() in _BITS:
        return bool(torch.equal(a.view(_BITS[a.element_size()]), b.view(_BITS[b.element_size()])))
    return bool(torch.equal(a, b))


def _unpack(gen: ModuleType, plan: Any, projection: str, packed: torch.Tensor) -> torch.Tensor | None:
    """Undo `_C::prepack_moe_weight` on `packed` (padded shape), or None if it is not a per-expert permutation.

    The kernel's prepack only moves elements. Prepacking one expert's worth of
    position codes (base-256 digits, exact in any float dtype) recovers where each
    element went; the same map is applied to every expert.
    """
    experts, rows, cols = packed.shape
    n = rows * cols
    digits = max(1, (max(n - 1, 1).bit_length() + 7) // 8)
    one = _plan_one_expert(gen, plan)
    if one is None:
        return None
    src = torch.zeros(n, dtype=torch.int64)
    index = torch.arange(n, dtype=torch.int64)
    lay = layout(gen)
    shape13, shape2 = lay.weight("w13").shapes(one)[1], lay.weight("w2").shapes(one)[1]
    prepack_padded = kernel(gen).prepack_padded
    for d in range(digits):
        code = ((index // 256**d) % 256).to(packed.dtype)
        w13 = code.reshape(shape13) if projection == "w13" else torch.zeros(shape13, dtype=packed.dtype)
        w2 = code.reshape(shape2) if projection == "w2" else torch.zeros(shape2, dtype=packed.dtype)
        p13, p2 = prepack_padded(w13.contiguous(), w2.contiguous(), one)
        out = (p13 if projection == "w13" else p2).data.reshape(-1)
        src += out.to(torch.int64) * 256**d
    if src.min() < 0 or src.max() >= n or not bool((torch.bincount(src, minlength=n) == 1).all()):
        return None
    flat = packed.reshape(experts, n)
    unpacked = torch.empty_like(flat)
    unpacked[:, src] = flat
    return unpacked.reshape(experts, rows, cols)


def _plan_one_expert(gen: ModuleType, plan: Any) -> Any:
    try:
        return layout(gen).replan(plan, num_experts=1)
    except gen.LayoutContractError:
        return None


def _row_axis(tensor: TensorEntry, plan: Any) -> tuple[int, Any] | None:
    """The axis a wrong value is described along: the contract's padded axis when it holds more than one
    position, else the first axis after the experts with more than one (a scale's output rows:
    `w2_weight_scale` [E, H, 1] has its one-position group axis padded, its rows on dim 1)."""
    where = padded_axis(tensor, plan)
    if where is not None and int(where[1].padded) > 1:
        return where
    for i, axis in enumerate(tensor.axis_table(plan)):
        if i > 0 and int(axis.padded) > 1:
            return i, axis
    return where


def _owner(name: str, axis: Any, padded_index: int) -> str:
    """What the contract puts at `padded_index` of `axis` (a generated module's runtime axis):
    a logical entry, or a pad position (algebra.locate)."""
    word = algebra.Word.parse(axis.layout)
    where = algebra.locate(word, axis.segments, axis.logical, axis.padded, padded_index)
    if where is None:
        return "outside the layout"
    if where.kind == "entry":
        return _entry_name(name, axis, word, where)
    if where.segment is not None and axis.segments > 1:  # a pad past one segment's run (halves)
        segs = _SEGMENTS.get(name, ())
        return f"pad of {segs[where.segment] if where.segment < len(segs) else f'segment {where.segment}'}"
    return "pad"


def _logical_name(name: str, axis: Any, q: int) -> str:
    """The logical entry at position `q` of the unpadded (checkpoint-ordered) axis."""
    word = algebra.Word.parse(axis.layout)
    where = algebra.locate(word, axis.segments, axis.logical, axis.logical, q)
    if where is None or where.kind != "entry":
        return f"{axis.name}[{q}]"
    return _entry_name(name, axis, word, where)


def _entry_name(name: str, axis: Any, word: algebra.Word, where: algebra.Located) -> str:
    """`gate[i]` / `up[i]` of a segmented axis, else the axis's logical index (`n[q]`)."""
    segs = _SEGMENTS.get(name)
    k, i = where.segment or 0, where.entry or 0
    if not segs or axis.segments == 1:
        return f"{axis.name}[{algebra.position(word, axis.segments, k, i, axis.logical, axis.logical)}]"
    return f"{segs[k]}[{i}]"


def _message(gen: ModuleType, plan: Any, info: LayerInfo, tensor: TensorEntry, expected: torch.Tensor,
             actual: torch.Tensor | None, logical: torch.Tensor, *, packed: bool) -> str:
    head = f"layoutc: layer {info.name}: {tensor.name} is not laid out as contract {gen.CONTRACT} says"
    line = tensor_line(gen, tensor)
    where = _row_axis(tensor, plan)
    name = tensor.role  # what _SEGMENTS is keyed by
    if actual is None or where is None:
        what = "the prepacked weights differ from the contract's prepack of the loaded weights" if packed \
            else "the values differ from the contract's padding of the loaded weights"
        return f"{head}: {what}; {line}"
    dim, axis = where
    bad = _bad_experts(expected, actual)
    # What the wrong rows hold is read over the wrong experts only (a pad one expert got wrong
    # reads as that expert's constant), dim 0 being every MoE tensor's experts axis.
    e, a, lg = (t[bad].movedim(dim, 0).reshape(t.shape[dim], -1) if bad else
                t.movedim(dim, 0).reshape(t.shape[dim], -1) for t in (expected, actual, logical))
    differs = ~(_as_bits(e) == _as_bits(a)).all(dim=1)
    rows = [int(p) for p in torch.nonzero(differs).flatten()]
    # w2's intermediate axis is its last (k): columns; w13's and the biases' n axis: rows.
    unit = "columns" if expected.dim() == 3 and dim == 2 else "rows"
    runs: list[dict[str, Any]] = []
    for p in rows[:_MAX_ROWS]:
        should, holds = _owner(name, axis, p), _holds(name, axis, a[p], lg, unit)
        last = runs[-1] if runs else None
        if last and last["hi"] == p - 1 and _next(last["should"][1], should) and _next(last["holds"][1], holds):
            last["hi"], last["should"][1], last["holds"][1] = p, should, holds
        else:
            runs.append({"lo": p, "hi": p, "should": [should, should], "holds": [holds, holds]})
    parts = []
    for run in runs[:_MAX_RUNS]:
        span = f"{unit[:-1]} {run['lo']} holds" if run["lo"] == run["hi"] else \
            f"{unit} {run['lo']}..{run['hi']} hold"
        parts.append(f"{span} {_span(*run['holds'])}, where the contract puts {_span(*run['should'])}")
    more = f"; and more ({len(runs) - _MAX_RUNS} runs)" if len(runs) > _MAX_RUNS else ""
    if len(rows) > _MAX_ROWS:
        more += f"; {unit} after {rows[_MAX_ROWS - 1]} not described"
    kind = "unpacked from _C::prepack_moe_weight, " if packed else ""
    return (f"{head} ({kind}axis {axis.name}: {axis.layout}, {axis.segments} x {axis.logical} -> "
            f"{axis.segments} x {axis.padded}; {len(rows)} of {e.shape[0]} {unit} wrong, in "
            f"{_experts(bad, expected.shape[0])}): " + "; ".join(parts) + f"{more}; {line}")


def _bad_experts(expected: torch.Tensor, actual: torch.Tensor) -> list[int]:
    """The experts (dim 0 of every MoE tensor) whose bits differ (`_same`'s rule: -0.0 is not 0.0)."""
    total = expected.shape[0]
    e, a = _as_bits(expected.reshape(total, -1)), _as_bits(actual.reshape(total, -1))
    return [int(i) for i in torch.nonzero(~(e == a).all(dim=1)).flatten()]


def _as_bits(t: torch.Tensor) -> torch.Tensor:
    """`t`'s bits as integers of its element size (a float tensor), else `t`: element-wise `==` on them is `_same`'s."""
    return t.view(_BITS[t.element_size()]) if t.is_floating_point() and t.element_size() in _BITS else t


def _experts(bad: list[int], total: int) -> str:
    """`expert 3 of 8` / `experts 0..5, 7 of 8`."""
    spans: list[list[int]] = []
    for i in bad:
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in spans)
    return f"expert{'s' if len(bad) != 1 else ''} {text} of {total}"


def _holds(name: str, axis: Any, row: torch.Tensor, logical: torch.Tensor, unit: str = "rows") -> str:
    """What a padded row (or column: `unit`) of vLLM's tensor holds, bit for bit: the pad code, a
    constant, a loaded (logical) row, or neither."""
    bits = _as_bits(row)
    if not bool(bits.any()):
        return "the pad code 0"
    if bool((bits == bits.flatten()[0]).all()):
        first = float(row.flatten()[0])
        return "the constant NaN" if first != first else f"the constant {first!r}"
    matches = torch.nonzero((_as_bits(logical) == bits).all(dim=1)).flatten()
    if matches.numel():
        return _logical_name(name, axis, int(matches[0]))
    return f"values that are neither the pad code nor any loaded {unit[:-1]}"


def _next(prev: str, cur: str) -> bool:
    """Whether `cur` continues `prev` in a run: the same pad, or the next logical index of one segment."""
    if prev == cur and not prev.endswith("]"):
        return True
    a, b = re.fullmatch(r"(.*)\[(\d+)\]", prev), re.fullmatch(r"(.*)\[(\d+)\]", cur)
    if a and b:
        return a.group(1) == b.group(1) and int(b.group(2)) == int(a.group(2)) + 1
    return False


def _span(first: str, last: str) -> str:
    if first == last:
        return first
    a, b = re.fullmatch(r"(.*)\[(\d+)\]", first), re.fullmatch(r"(.*)\[(\d+)\]", last)
    if a and b and a.group(1) == b.group(1):
        return f"{a.group(1)}[{a.group(2)}..{b.group(2)}]"
    return f"{first} .. {last}"
