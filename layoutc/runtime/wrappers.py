"""The functions a generated module exports for each tensor and kernel, made from its tables.

A generated module states what is particular to its contract: `Plan`, `plan()` and its
arithmetic, one axis table per tensor (`_<tensor>_axes(plan)`), one `Row` per tensor and, where
a glue is bound, the kernel configuration. `tensor_functions` and `kernel_functions` make
every per-tensor function (`<t>_shapes`, `pad_<t>`, `unpad_<t>`, `<t>_full_shape`,
`shard_<t>`, `alloc_<t>`, `load_<t>`) and the kernel functions (`load_kernel`, `prepack`,
`prepack_padded`) from those tables, with their docstrings, once: the module binds them to
its names. Each one checks its plan (`PlanChecker.require`) and calls `layout.py`,
`loading.py` or the glue exactly as a function written out per tensor would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from . import expert_map as _expert_map
from . import layout as _layout
from . import loading as _loading
from .errors import LayoutContractError
from .experts import EpPlan
from .interface import Projection, TensorEntry, TensorKind
from .layout import Axis
from .packed import KernelConfig, PackedWeight
from .plans import PlanChecker


@dataclass(frozen=True)
class Module:
    """What every function of one generated module shares: its contract's name and file, its
    plan checker, the parameter its shards split over (None: nothing is sharded) and the
    contract's block shard, for the docstrings (None: an even split)."""

    contract: str
    source_file: str
    plans: PlanChecker[Any]
    tp_param: str | None
    block_shard: str | None = None


@dataclass(frozen=True)
class Row:
    """One tensor of a contract, as its module's table states it.

    axes: the tensor's axis table of a plan. dtype: its storage dtype, or the name of the
    plan's dtype parameter. fill / tail_fill: the stored pad code and the code past a short
    rank's block-shard slice (None: not declared). roles: the segment roles of its segmented
    axis (a function of the plan where a `when` alternative orders them otherwise; `()`: none).
    logical / padded / storage / fill_doc / tail_doc / roles_doc: what the docstrings say.
    """

    name: str
    kind: TensorKind
    projection: Projection
    line: int
    axis_names: tuple[str, ...]
    axes: Callable[[Any], tuple[Axis, ...]]
    dtype: torch.dtype | str
    fill: Any
    shape_docs: tuple[str, str]
    fill_doc: str
    roles: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = ()
    roles_doc: str = '"down" or None (the whole tensor)'
    optional: bool = False
    tail_fill: Any = None
    tail_doc: str | None = None

    @property
    def once(self) -> bool:
        """A row-parallel output bias: added once by the all-reduce (rank 0 holds it)."""
        return self.kind == "bias" and self.projection == "w2"

    @property
    def logical(self) -> str:
        return self.shape_docs[0]

    @property
    def padded(self) -> str:
        return self.shape_docs[1]

    @property
    def storage(self) -> str:
        return self.dtype if isinstance(self.dtype, str) else str(self.dtype).removeprefix("torch.")


class TensorFunctions(NamedTuple):
    """A tensor's functions, in the order a module binds them (full_shape / shard: None
    where nothing is sharded)."""

    shapes: Callable[..., tuple[tuple[int, ...], tuple[int, ...]]]
    pad: Callable[..., torch.Tensor]
    unpad: Callable[..., torch.Tensor]
    full_shape: Callable[..., tuple[int, ...]] | None
    shard: Callable[..., torch.Tensor] | None
    alloc: Callable[..., torch.Tensor]
    load: Callable[..., None]


def _named(fn: Any, name: str, module: str, doc: str) -> Any:
    """`fn` as the module function `name`: its name, module, docstring, and its plan typed
    as the module's `Plan` (what `help()` and `inspect.signature` show)."""
    if "plan" in fn.__annotations__:
        fn.__annotations__["plan"] = "Plan"
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = module
    fn.__doc__ = doc
    return fn


def _tensor_docs(m: Module, r: Row) -> dict[str, str]:
    """The docstrings of `r`'s functions (the text a function written out per tensor had)."""
    n, opt = r.name, ", optional" if r.optional else ""
    every = ".\n    Every" if len(r.fill_doc) > 28 else ". Every"
    as_new = ",\n    as a new tensor." if len(n) > 18 else ", as a new tensor."
    docs = {
        "shapes": f"(logical shape, padded shape) of `{n}` ({r.kind} of {r.projection}) under `plan`.",
        "pad": f"""Pad `{n}` ({r.kind} of {r.projection}{opt}) for the kernel.

    Input (logical, dtype {r.storage}, CPU):
        {r.logical}
    Output (padded, same dtype):
        {r.padded}
    Pad positions hold the {r.fill_doc}{every} logical element is written once, only
    pad positions are filled. When nothing is padded and `out` is None, returns
    `t` itself (no copy); with `out`, writes into it and returns it.
    Raises LayoutContractError on a wrong shape, dtype, device or layout, or an
    unsupported plan. Source: {m.source_file} line {r.line}.
    """,
        "unpad": f"""Inverse of `pad_{n}`: padded -> logical `{n}`{as_new}

    Raises LayoutContractError on a wrong shape, dtype, device or layout.
    """,
        "full_shape": f"The full checkpoint shape of `{n}` that `shard_{n}` reads (all ranks' slices).",
    }
    shard = f"""Rank `rank`'s padded shard of the full checkpoint `{n}`.

    `full` has the shape `{n}_full_shape(plan)`: the logical shape with the
    intermediate axis at its full checkpoint length (each gate/up half separately,
    or pairs for an interleaved axis). Only the rank's slice is read, with the
    logical per-rank stride (vllm#43865), straight into the padded destination.
"""
    if m.block_shard is not None:
        shard += f"""    The contract shards in whole blocks ({m.block_shard}): rank r
    reads entries [min(r * L, FULL), min((r + 1) * L, FULL)) of each segment, so
"""
        if r.tail_fill is not None:
            shard += f"""    the last ranks may read fewer than L (or none); the rest of their L holds the
    `tail fill`, {r.tail_doc}; the pad holds the fill.
"""
        else:
            shard += "    the last ranks may read fewer than L (or none); the rest of their L holds the fill.\n"
    if r.once:
        shard += """    This is a row-parallel output bias: the all-reduce sums the ranks, so rank 0
    gets the bias and every other rank zeros (added once, never tp_size times).
"""
    docs["shard"] = (
        shard
        + f"""    Output (dtype {r.storage}):
        {r.padded}
    Raises LayoutContractError on a wrong shape, dtype, device, layout or rank.
    """
    )
    alloc = "Rank `rank`'s padded `" + n + "`: pads written once, live rows left to load.\n"
    if r.tail_fill is not None:
        alloc += f"""
    Past a short rank's slice (the block shard's tail) it holds the tail fill,
    {r.tail_doc}; the pad holds the fill.
"""
    alloc += f"""
    Shape (dtype {r.storage}):
        {r.padded}
"""
    if r.once:
        alloc += f"""    A row-parallel output bias: on ranks other than 0 it is all zeros and
    `load_{n}` reads nothing there (the all-reduce adds it once).
"""
    docs["alloc"] = (
        alloc
        + f"""    `out`: use this preallocated tensor instead. Raises LayoutContractError on a
    bad rank or `out`. Source: {m.source_file} line {r.line}.
    """
    )
    docs["load"] = f"""Load one checkpoint tensor into `dst` (from `alloc_{n}`).

    `src`: a torch tensor or a safetensors slice (`get_slice`, memory-mapped).

    Reads only rank `rank`'s slice. `expert`: the source is that expert's tensor
    (else it holds every expert).
    `role`: {r.roles_doc}.
    `transposed`: the source's last two dims are swapped (`x @ W` weights);
    `source_layout`: `halves` or `interleave` rows of a fused gate/up source.
    Raises LayoutContractError on a wrong shape, role, expert or rank.
    """
    return docs


def tensor_functions(m: Module, r: Row, dtypes: dict[str, torch.dtype], module: str) -> TensorFunctions:
    """The functions of tensor `r` of the module `module` (its `__name__`). dtypes: the
    runtime's table of storage dtypes by name (dtypes.py)."""
    plans, contract, name, axes, fill, once = m.plans, m.contract, r.name, r.axes, r.fill, r.once
    fixed = r.dtype if isinstance(r.dtype, torch.dtype) else None
    param = r.dtype if isinstance(r.dtype, str) else ""
    roles = r.roles

    def dtype(plan: Any) -> torch.dtype:
        return fixed if fixed is not None else dtypes[getattr(plan, param)]

    def tp(plan: Any) -> int:
        return getattr(plan, m.tp_param) if m.tp_param is not None else 1

    def shapes(plan: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        plans.require(plan)
        return plans.memo(name, plan, lambda: (_layout.logical_shape(axes(plan)), _layout.padded_shape(axes(plan))))

    def pad(t: torch.Tensor, plan: Any, *, out: torch.Tensor | None = None) -> torch.Tensor:
        plans.require(plan)
        return _layout.pad(contract, name, t, axes(plan), dtype(plan), fill, out)

    def unpad(t: torch.Tensor, plan: Any) -> torch.Tensor:
        plans.require(plan)
        return _layout.unpad(contract, name, t, axes(plan), dtype(plan))

    def full_shape(plan: Any) -> tuple[int, ...]:
        plans.require(plan)
        return _layout.full_shape(axes(plan), tp(plan))

    def shard(full: torch.Tensor, rank: int, plan: Any, *, out: torch.Tensor | None = None) -> torch.Tensor:
        plans.require(plan)
        tail = {} if r.tail_fill is None else {"tail_fill": r.tail_fill}
        return _layout.shard(
            contract, name, full, rank, tp(plan), axes(plan), dtype(plan), fill, out, once=once, **tail
        )

    def alloc(plan: Any, rank: int = 0, *, out: torch.Tensor | None = None) -> torch.Tensor:
        plans.require(plan)
        tail = {} if r.tail_fill is None else {"tail_fill": r.tail_fill}
        return _loading.allocate(
            contract, name, axes(plan), dtype(plan), fill, rank, tp(plan), once=once, out=out, **tail
        )

    def load(
        dst: torch.Tensor,
        src: Any,
        plan: Any,
        rank: int = 0,
        *,
        expert: int | None = None,
        role: str | None = None,
        transposed: bool = False,
        source_layout: str = _loading.SOURCE_LAYOUTS[0],
    ) -> None:
        plans.require(plan)
        table = plans.memo(f"{name} axes", plan, lambda: axes(plan))  # one tuple per plan: loading remembers by it
        _loading.load(
            contract,
            name,
            dst,
            src,
            table,
            dtype(plan),
            rank,
            tp(plan),
            roles=roles(plan) if callable(roles) else roles,
            expert=expert,
            role=role,
            transposed=transposed,
            source_layout=source_layout,
            once=once,
        )

    docs = _tensor_docs(m, r)
    sharded = m.tp_param is not None
    return TensorFunctions(
        shapes=_named(shapes, f"{name}_shapes", module, docs["shapes"]),
        pad=_named(pad, f"pad_{name}", module, docs["pad"]),
        unpad=_named(unpad, f"unpad_{name}", module, docs["unpad"]),
        full_shape=_named(full_shape, f"{name}_full_shape", module, docs["full_shape"]) if sharded else None,
        shard=_named(shard, f"shard_{name}", module, docs["shard"]) if sharded else None,
        alloc=_named(alloc, f"alloc_{name}", module, docs["alloc"]),
        load=_named(load, f"load_{name}", module, docs["load"]),
    )


def entry(r: Row, f: TensorFunctions) -> TensorEntry:
    """The module's `LAYOUT` record of tensor `r` with its functions `f`."""
    optional = " optional" if r.optional else ""
    return TensorEntry(
        r.name,
        r.kind,
        r.projection,
        optional=r.optional,
        axes=r.axis_names,
        contract_line=r.line,
        declaration=f"tensor {r.name}: {r.kind} {r.projection}{optional}",
        shapes=f.shapes,
        axis_table=r.axes,
        pad=f.pad,
        unpad=f.unpad,
        alloc=f.alloc,
        load=f.load,
        full_shape=f.full_shape,
        shard=f.shard,
    )


def local_experts(
    m: Module, module: str, experts: str, count: str, placement: str, redundant: str | None
) -> Callable[[int, Any], tuple[int, torch.Tensor | None]]:
    """`local_experts(rank, plan)` of a contract whose experts (plan field `experts`) are
    partitioned over `count` EP ranks by `placement`, with `redundant` extra (None: 0)."""
    plans = m.plans

    def local_experts(rank: int, plan: Any) -> tuple[int, torch.Tensor | None]:
        plans.require(plan)
        extra = getattr(plan, redundant) if redundant is not None else 0
        return _expert_map.local_experts(
            rank, EpPlan(getattr(plan, experts), getattr(plan, count), getattr(plan, placement), extra)
        )

    doc = f"""`(local_num_experts, expert_map)` of EP rank `rank` (0..{count}-1) under `plan`.

    expert_map: int32 [{experts} + redundant], the local id of each expert the rank
    holds and -1 elsewhere; None at {count} 1. Equal to vLLM 0.32's
    `determine_expert_map` (tests/conformance/test_expert_parallel.py).
    Raises LayoutContractError for a plan not made by `plan()`, ExpertParallelError (a
    LayoutContractError) EP06 for a rank outside the degree.
    """
    named: Callable[[int, Any], tuple[int, torch.Tensor | None]] = _named(local_experts, "local_experts", module, doc)
    return named


class KernelFunctions(NamedTuple):
    """The kernel functions of a module whose contract binds a glue."""

    load_kernel: Callable[[], None]
    prepack_padded: Callable[..., tuple[PackedWeight, PackedWeight]]
    prepack: Callable[..., tuple[PackedWeight, PackedWeight]]


def kernel_functions(
    m: Module,
    module: str,
    glue: Any,
    config: Callable[[Any], KernelConfig],
    f13: TensorFunctions,
    f2: TensorFunctions,
    names: tuple[str, str],
    docs: tuple[str, ...],
) -> KernelFunctions:
    """`load_kernel`, `prepack_padded` and `prepack` of module `module`: glue is its glue module
    (runtime/glue/<name>.py), config its kernel configuration of a plan; f13 / f2 the
    weights' functions; names: the weights' tensor names; docs: (w13 padded, w2 padded,
    w13 logical, w2 logical) shapes for the docstrings."""
    plans, contract = m.plans, m.contract

    def load_kernel() -> None:
        glue.load_kernel(contract)

    def prepack_padded(
        padded_w13: torch.Tensor,
        padded_w2: torch.Tensor,
        plan: Any,
        *,
        out: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[PackedWeight, PackedWeight]:
        plans.require(plan)
        cfg = config(plan)
        a = _layout.check_tensor(contract, "padded_w13", padded_w13, f13.shapes(plan)[1], cfg.dtype)
        b = _layout.check_tensor(contract, "padded_w2", padded_w2, f2.shapes(plan)[1], cfg.dtype)
        dst = None
        if out is not None:
            if not isinstance(out, tuple) or len(out) != 2:
                raise LayoutContractError(f"{contract}: prepack_padded out= must be a (w13, w2) tuple of tensors")
            # each out= shares memory with neither input (w13 is packed before w2 is read) nor the other out=
            o13 = _layout.check_out(contract, "packed w13", out[0], (a, b), f13.shapes(plan)[1], cfg.dtype)
            o2 = _layout.check_out(contract, "packed w2", out[1], (a, b, o13), f2.shapes(plan)[1], cfg.dtype)
            dst = (o13, o2)
        packed: tuple[PackedWeight, PackedWeight] = glue.prepack_padded(cfg, a, b, dst)
        return packed

    pad13, pad2 = f13.pad, f2.pad

    def prepack(w13: torch.Tensor, w2: torch.Tensor, plan: Any) -> tuple[PackedWeight, PackedWeight]:
        plans.require(plan)
        return prepack_padded(pad13(w13, plan).contiguous(), pad2(w2, plan).contiguous(), plan)

    doc_load = f"""Make the kernel's ops available (see runtime/glue/{glue.__name__.rsplit(".", 1)[-1]}.py).

    Raises KernelUnavailableError naming the package to install.
    """
    doc_padded = f"""Prepack already padded weights (from `pad_*` or `shard_*`) for `fused_moe`.

    padded_w13: {docs[0]}
    padded_w2: {docs[1]}
    Both in the weights' storage dtype, contiguous CPU. Returns the two
    `PackedWeight` that `fused_moe` takes (it refuses anything else).
    out: (w13, w2) contiguous CPU tensors of the padded shapes and dtype, sharing no memory
    with the inputs, that the packed bytes are written into instead of new tensors (e.g.
    a whole layer's packed tensor, filled a chunk of experts at a time), where the
    kernel's packed form is such a tensor.
    Raises LayoutContractError on wrong tensors or `out` (or `out` for a kernel whose
    packed form is not a tensor of the padded shape), KernelUnavailableError when the
    kernel cannot run here.
    """
    doc_prepack = f"""Pad both logical weights, then prepack them (`pad_{names[0]}`, `pad_{names[1]}`, `prepack_padded`).

    w13 (logical): {docs[2]}
    w2 (logical): {docs[3]}
    Raises as `pad_*` and `prepack_padded`.
    """
    return KernelFunctions(
        load_kernel=_named(load_kernel, "load_kernel", module, doc_load),
        prepack_padded=_named(prepack_padded, "prepack_padded", module, doc_padded),
        prepack=_named(prepack, "prepack", module, doc_prepack),
    )


def axis(
    name: str,
    word: str,
    *,
    logical: int,
    padded: int | None = None,
    segments: int = 1,
    sharded: bool = False,
    full: int | None = None,
) -> Axis:
    """One row of an axis table, by keyword: `padded` defaults to `logical` (an axis the
    contract never pads), `segments` to 1, `sharded` to False (not split over TP ranks)."""
    return Axis(name, str(word), segments, logical, logical if padded is None else padded, sharded, full)
