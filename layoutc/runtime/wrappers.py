"""The functions a generated module exports for each tensor and kernel, made from its tables.

A generated module states what is particular to its contract: `Plan`, `plan()` and its
arithmetic and rules, one axis table per tensor (`_<tensor>_axes(plan)`), one row per tensor
(`Module.tensor`) and, where a glue is bound, what its kernel configuration reads of a plan
(`Module.kernel`). From those this module makes every per-tensor function (`<t>_shapes`,
`pad_<t>`, `unpad_<t>`, `<t>_full_shape`, `shard_<t>`, `alloc_<t>`, `load_<t>`), the kernel
functions (`load_kernel`, `prepack`, `prepack_padded`, `fused_moe` and the kernel configuration
`_config`), `local_experts` and the module's `LAYOUT`, with their docstrings, once: the module
binds them to its names. Each one checks its plan (`PlanChecker.require`) and calls
`layout.py`, `loading.py`, `expert_map.py` or the glue exactly as a function written out in
the module would. Nothing here imports a glue: a module hands its own glue to `Module.kernel`,
so a vendored module needs only the glue it uses.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import torch

from . import expert_map as _expert_map
from . import layout as _layout
from . import loading as _loading
from .dtypes import TORCH
from .errors import LayoutContractError
from .experts import EpPlan
from .interface import (
    LAYOUT_VERSION,
    KernelEntry,
    ModelsEntry,
    ModuleLayout,
    PlanParam,
    Projection,
    RouteEntry,
    TensorEntry,
    TensorKind,
)
from .layout import Axis
from .packed import KernelConfig, PackedWeight
from .plans import PlanChecker, replanner


@dataclass(frozen=True)
class Module:
    """What every function of one generated module shares: the module's `__name__`, its
    contract's name and file, its `plan()`, `Plan` and parameter table (`PlanParam`, in the
    order `plan()` takes them), its plan checker, the parameter its shards split over (None:
    nothing is sharded) and the contract's block shard, for the docstrings (None: an even
    split). Made by `module()`."""

    name: str
    contract: str
    source_file: str
    plan: Callable[..., Any]
    plan_type: type[Any]
    params: tuple[PlanParam, ...]
    plans: PlanChecker[Any]
    tp_param: str | None
    block_shard: str | None = None

    def tensor(self, **row: Any) -> Tensor:
        """The functions of one tensor, from its row (the fields of `Row`, by keyword)."""
        r = Row(**row)
        return Tensor(r, tensor_functions(self, r))

    def kernel(
        self,
        glue: Any,
        w13: Tensor,
        w2: Tensor,
        *,
        biases: tuple[Tensor, ...] = (),
        activation: Callable[[Any], str],
        args: Callable[[Any], tuple[tuple[str, Any], ...]],
        ep: tuple[str, Callable[[Any], int]] | None = None,
    ) -> Kernel:
        """The kernel functions of a contract that binds `glue` (runtime/glue/<name>.py): w13 / w2
        its weights, biases its bias tensors (in declaration order); activation / args: the
        kernel configuration's activation and glue arguments of a plan; ep: (the EP degree's
        plan field, the rank's experts axis of a plan) where the contract partitions experts."""
        return kernel_functions(self, glue, w13, w2, biases, activation, args, ep)

    def layout(
        self,
        tensors: tuple[Tensor, ...],
        *,
        kernel: Kernel | None = None,
        local_experts: Callable[[int, Any], tuple[int, torch.Tensor | None]] | None = None,
        models: tuple[ModelsEntry, ...] = (),
        routes: tuple[RouteEntry, ...] = (),
    ) -> ModuleLayout:
        """The module's `LAYOUT` (interface.py ModuleLayout)."""
        return ModuleLayout(
            version=LAYOUT_VERSION,
            contract=self.contract,
            source_file=self.source_file,
            plan=self.plan,
            plan_type=self.plan_type,
            plan_params=self.params,
            shard_count=self.tp_param,
            tensors=tuple(t.entry for t in tensors),
            kernel=kernel.entry if kernel is not None else None,
            local_experts=local_experts,
            models=models,
            routes=routes,
        )


def module(
    name: str,
    contract: str,
    source_file: str,
    plan: Callable[..., Any],
    plan_type: type[Any],
    params: tuple[PlanParam, ...],
    *,
    tp_param: str | None,
    block_shard: str | None = None,
) -> Module:
    """The `Module` of a generated module: its plan checker re-derives a plan with `plan()`
    itself, from the plan's fields named in `params` (plans.py `replanner`)."""
    checker: PlanChecker[Any] = PlanChecker(contract, plan_type, replanner(plan, tuple(p.name for p in params)))
    return Module(name, contract, source_file, plan, plan_type, params, checker, tp_param, block_shard)


@dataclass(frozen=True)
class Row:
    """One tensor of a contract, as its module's table states it.

    axes: the tensor's axis table of a plan. dtype: its storage dtype, or the name of the
    plan's dtype parameter. fill / tail_fill: the stored pad code and the code past a short
    rank's block-shard slice (None: not declared). roles: the segment roles of its segmented
    axis (a function of the plan where a `when` alternative orders them otherwise; `()`: none).
    logical / padded / storage / fill_doc / tail_doc / roles_doc: what the docstrings say
    (fill_doc None: read off `fill`; roles_doc None: read off `roles`).
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
    fill_doc: str | None = None
    roles: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = ()
    roles_doc: str | None = None
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
    def fill_text(self) -> str:
        """What the docstrings say the pad holds: `fill_doc`, else read off `fill` (its code)."""
        if self.fill_doc is not None:
            return self.fill_doc
        return "left uninitialised" if self.fill is None else f"stored code {int(self.fill)}"

    @property
    def roles_text(self) -> str:
        """What `load_<t>`'s docstring says `role` may be: `roles_doc`, else read off `roles`."""
        if self.roles_doc is not None:
            return self.roles_doc
        if callable(self.roles) or not self.roles:
            return '"down" or None (the whole tensor)'
        names = ", ".join(f'"{role}"' for role in self.roles)
        return f'one of {names} (one segment), or None / "gate_up" (all)'

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
    every = ".\n    Every" if len(r.fill_text) > 28 else ". Every"
    as_new = ",\n    as a new tensor." if len(n) > 18 else ", as a new tensor."
    docs = {
        "shapes": f"(logical shape, padded shape) of `{n}` ({r.kind} of {r.projection}) under `plan`.",
        "pad": f"""Pad `{n}` ({r.kind} of {r.projection}{opt}) for the kernel.

    Input (logical, dtype {r.storage}, CPU):
        {r.logical}
    Output (padded, same dtype):
        {r.padded}
    Pad positions hold the {r.fill_text}{every} logical element is written once, only
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
    `role`: {r.roles_text}.
    `transposed`: the source's last two dims are swapped (`x @ W` weights);
    `source_layout`: `halves` or `interleave` rows of a fused gate/up source.
    Raises LayoutContractError on a wrong shape, role, expert or rank.
    """
    return docs


def storage_dtype(r: Row) -> Callable[[Any], torch.dtype]:
    """The storage dtype of tensor `r` under a plan: its fixed dtype, or the plan's dtype
    parameter's (looked up in dtypes.py)."""
    fixed = r.dtype if isinstance(r.dtype, torch.dtype) else None
    param = r.dtype if isinstance(r.dtype, str) else ""

    def dtype(plan: Any) -> torch.dtype:
        return fixed if fixed is not None else TORCH[getattr(plan, param)]

    return dtype


def tensor_functions(m: Module, r: Row) -> TensorFunctions:
    """The functions of tensor `r` of the module `m`."""
    plans, contract, name, axes, fill, once = m.plans, m.contract, r.name, r.axes, r.fill, r.once
    roles = r.roles
    dtype = storage_dtype(r)
    module = m.name

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


@dataclass(frozen=True)
class Tensor:
    """One tensor of a module: its row and its functions. Iterating it gives the functions in
    the order the module binds them (`full_shape` and `shard` only where something is sharded)."""

    row: Row
    functions: TensorFunctions

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        return iter([f for f in self.functions if f is not None])

    @overload
    def __getitem__(self, part: int) -> Callable[..., Any]: ...
    @overload
    def __getitem__(self, part: slice) -> tuple[Callable[..., Any], ...]: ...
    def __getitem__(self, part: int | slice) -> Callable[..., Any] | tuple[Callable[..., Any], ...]:
        return tuple(self)[part]

    @property
    def entry(self) -> TensorEntry:
        """The module's `LAYOUT` record of this tensor."""
        return entry(self.row, self.functions)


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
    m: Module, experts: str, count: str, placement: str, redundant: str | None
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
    named: Callable[[int, Any], tuple[int, torch.Tensor | None]] = _named(local_experts, "local_experts", m.name, doc)
    return named


@dataclass(frozen=True)
class Kernel:
    """The kernel functions of a module whose contract binds a glue. Iterating it gives them in
    the order the module binds them: load_kernel, prepack_padded, prepack, fused_moe and the
    kernel configuration of a plan (`_config`)."""

    glue: Any
    load_kernel: Callable[[], None]
    prepack_padded: Callable[..., tuple[PackedWeight, PackedWeight]]
    prepack: Callable[..., tuple[PackedWeight, PackedWeight]]
    fused_moe: Callable[..., torch.Tensor]
    config: Callable[[Any], KernelConfig]

    def __iter__(self) -> Iterator[Callable[..., Any]]:
        return iter((self.load_kernel, self.prepack_padded, self.prepack, self.fused_moe, self.config))

    @property
    def entry(self) -> KernelEntry:
        """The module's `LAYOUT` record of its kernel."""
        return KernelEntry(
            glue=self.glue.INTERFACE,
            config=self.config,
            load_kernel=self.load_kernel,
            prepack=self.prepack,
            prepack_padded=self.prepack_padded,
            fused_moe=self.fused_moe,
        )


def _config_function(
    m: Module,
    glue: Any,
    w13: Tensor,
    w2: Tensor,
    biases: tuple[Tensor, ...],
    activation: Callable[[Any], str],
    args: Callable[[Any], tuple[tuple[str, Any], ...]],
) -> Callable[[Any], KernelConfig]:
    """`_config(plan)`: the kernel configuration `prepack_padded` records in each PackedWeight.
    Sizes are read off the weights' shapes (num_experts: w13's logical experts, a padded expert
    is never routed; hidden_size and the padded intermediate size: w13's padded shape); the
    view of the w13 segments is the glue's for the activation (its INTERFACE)."""
    plans, contract = m.plans, m.contract
    views = {a.name: str(a.view) for a in glue.INTERFACE.activations}
    shapes13, shapes2, dtype = w13.functions.shapes, w2.functions.shapes, storage_dtype(w13.row)
    parts = [(f"{b.row.projection}_bias", b.functions.shapes) for b in biases]

    def config(plan: Any) -> KernelConfig:
        def make() -> KernelConfig:
            act = activation(plan)
            return KernelConfig(
                contract=contract,
                num_experts=shapes13(plan)[0][0],
                hidden_size=shapes13(plan)[1][2],
                intermediate_padded=shapes13(plan)[1][1] // 2,
                dtype=dtype(plan),
                activation=act,
                w13_view=views[act],
                shapes=(("w13", shapes13(plan)[1]), ("w2", shapes2(plan)[1]), *((k, f(plan)[1]) for k, f in parts)),
                args=args(plan),
            )

        return plans.memo("config", plan, make)

    named: Callable[[Any], KernelConfig] = _named(config, "_config", m.name, "")
    named.__doc__ = None
    named.__annotations__["return"] = "KernelConfig"
    return named


_TENSOR, _OPTIONAL = "torch.Tensor", "torch.Tensor | None"


def _fused_moe_function(
    m: Module,
    glue: Any,
    config: Callable[[Any], KernelConfig],
    ep: tuple[str, Callable[[Any], int]] | None,
) -> Callable[..., torch.Tensor]:
    """`fused_moe(hidden_states, packed_w13, packed_w2, topk_weights, topk_ids, plan, *, ...)`: the
    glue's forward on this plan's kernel configuration. Its keywords are the glue's (the biases
    where its INTERFACE declares bias tensors, then its `forward_options`, default False), and
    `expert_map` where the contract partitions experts over EP ranks: then the kernel runs on
    the rank's local pairs only (expert_map.run_local), and global ids without a map are
    refused (EP05)."""
    interface, plans, contract = glue.INTERFACE, m.plans, m.contract
    biases = any(s.kind == "bias" for s in interface.tensors)
    options: dict[str, Any] = {"w13_bias": None, "w2_bias": None} if biases else {}
    options.update((o, False) for o in interface.forward_options)
    glue_options = tuple(options)
    if ep is not None:
        options["expert_map"] = None
    # under EP, run_local refuses input weighting above the top_k the kernel computes it at
    weighted = "apply_router_weight_on_input" in interface.forward_options and interface.router_weight_input_top_k == 1

    def fused_moe(
        hidden_states: torch.Tensor,
        packed_w13: PackedWeight,
        packed_w2: PackedWeight,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        plan: Any,
        **given: Any,
    ) -> torch.Tensor:
        unknown = next((k for k in given if k not in options), None)
        if unknown is not None:
            raise TypeError(f"fused_moe() got an unexpected keyword argument {unknown!r}")
        kw = {**options, **given}
        plans.require(plan)
        forward = {k: kw[k] for k in glue_options}
        if ep is None:
            out: torch.Tensor = glue.fused_moe(
                config(plan), hidden_states, packed_w13, packed_w2, topk_weights, topk_ids, **forward
            )
            return out

        def kernel(x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
            result: torch.Tensor = glue.fused_moe(config(plan), x, packed_w13, packed_w2, weights, ids, **forward)
            return result

        count, experts = ep
        expert_map = kw["expert_map"]
        if expert_map is None and isinstance(topk_ids, torch.Tensor):
            _expert_map.refuse_global(contract, topk_ids, experts(plan), getattr(plan, count))
        extra = {"input_weighted": kw["apply_router_weight_on_input"] is True} if weighted else {}
        return _expert_map.run_local(contract, kernel, hidden_states, topk_weights, topk_ids, expert_map, **extra)

    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [
        inspect.Parameter(name, positional, annotation=kind)
        for name, kind in (
            ("hidden_states", _TENSOR),
            ("packed_w13", "PackedWeight"),
            ("packed_w2", "PackedWeight"),
            ("topk_weights", _TENSOR),
            ("topk_ids", _TENSOR),
            ("plan", "Plan"),
        )
    ]
    params += [
        inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v, annotation=_OPTIONAL if v is None else "bool")
        for k, v in options.items()
    ]
    fused_moe.__signature__ = inspect.Signature(params, return_annotation=_TENSOR)  # type: ignore[attr-defined]
    bias_doc = (
        """    w13_bias: the padded w13 bias (`pad_*` / `shard_*`); w2_bias: [num_experts,
    hidden_size] (under TP, `shard_*` gives it to rank 0 only).
"""
        if biases
        else ""
    )
    ep_doc = (
        f"""    expert_map: this EP rank's map from `local_experts` when topk_ids are the router's
    global ids: the kernel computes only the pairs routed to this rank's experts, with
    local ids (`_runtime.expert_map.local_pairs`: a pair whose expert is foreign, vLLM's -1,
    is never computed; a token with none adds exactly 0). Without it, under {ep[0]} > 1
    the ids must already be local: one at or above the rank's experts axis is refused (EP05).
"""
        if ep is not None
        else ""
    )
    doc = f"""Run the real kernel:
    {interface.summary}.

    hidden_states: [num_tokens, hidden_size] in the weights' dtype, contiguous CPU.
    packed_w13 / packed_w2: from `prepack` or `prepack_padded` with this plan.
    topk_weights / topk_ids: [num_tokens, top_k]; ids in [0, num_experts) of the
    weights' experts axis.
{bias_doc}{ep_doc}    Returns a new [num_tokens, hidden_size] tensor: this rank's partial sum (under
    TP, all-reduce over the ranks).
    Raises LayoutContractError on any wrong input, KernelUnavailableError when
    the kernel cannot run here.
    """
    named: Callable[..., torch.Tensor] = _named(fused_moe, "fused_moe", m.name, doc)
    return named


def kernel_functions(
    m: Module,
    glue: Any,
    w13: Tensor,
    w2: Tensor,
    biases: tuple[Tensor, ...],
    activation: Callable[[Any], str],
    args: Callable[[Any], tuple[tuple[str, Any], ...]],
    ep: tuple[str, Callable[[Any], int]] | None,
) -> Kernel:
    """The kernel functions of module `m` (`Module.kernel`): glue is its glue module
    (runtime/glue/<name>.py); w13 / w2 its weights; the docstrings give their shapes as the
    rows' shape_docs say."""
    plans, contract = m.plans, m.contract
    f13, f2 = w13.functions, w2.functions
    config = _config_function(m, glue, w13, w2, biases, activation, args)

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

    padded_w13: {w13.row.padded}
    padded_w2: {w2.row.padded}
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
    doc_prepack = f"""Pad both logical weights, then prepack them (`pad_{w13.row.name}`, `pad_{w2.row.name}`, `prepack_padded`).

    w13 (logical): {w13.row.logical}
    w2 (logical): {w2.row.logical}
    Raises as `pad_*` and `prepack_padded`.
    """
    return Kernel(
        glue=glue,
        load_kernel=_named(load_kernel, "load_kernel", m.name, doc_load),
        prepack_padded=_named(prepack_padded, "prepack_padded", m.name, doc_padded),
        prepack=_named(prepack, "prepack", m.name, doc_prepack),
        fused_moe=_fused_moe_function(m, glue, config, ep),
        config=config,
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
