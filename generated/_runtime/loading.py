# Copied by `layoutc compile` from layoutc/runtime/loading.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""Load one checkpoint tensor at a time into a rank's preallocated padded parameter.

This is how an engine's weight loader works: `allocate` makes the rank's padded
parameter once (pad positions written with the pad code, exactly once; live
positions left to be filled), then `load` copies one checkpoint tensor into its
rows: one expert's gate, up or down projection (`expert=e`, `role=...`), or a
fused per-layer tensor holding every expert (`expert=None`). Only the rank's
slice of the source is read: `src` may be a torch tensor or a slice object
(`get_shape()`, `get_dtype()`, `[index]`: safetensors' `safe_open(...).get_slice(name)`, or
the checkpoint reader's `MappedSlice`, which reads each region from the file), which is
indexed before it is materialised, in chunks of at most `CHUNK_ELEMENTS` elements, so peak memory is
the padded parameter plus one chunk.

Source orientation is the caller's declaration, never inferred (with
hidden_size == intermediate_size a transposed tensor has the right shape):

- `transposed=False`: the source's last two dims are the contract's (n, k) order
  (nn.Linear weights: `[out, in]`, e.g. Qwen3-MoE `gate_proj.weight` [I, H]);
- `transposed=True`: they are swapped (`x @ W` weights, e.g. gpt-oss
  `gate_up_proj` [E, H, 2I] and `down_proj` [E, I, H]).

A fused gate/up source (`role=None` or `"gate_up"`) declares its own row layout
with `source_layout`: `halves` ([gate | up], Qwen/Mixtral/Gemma-4) or
`interleave` ((gate, up) pairs, gpt-oss), words of the layout algebra (algebra.py), and
its segment order with `source_roles` (default `SOURCE_ROLES`, gate first, as every
checkpoint format above stores it). The destination layout and segment order are the
contract's (its `halves(up | gate, ...)` / `interleave(up | gate, ...)` roles); the loader
converts between the two (strided copies, source segment j into the contract's segment of
role `source_roles[j]`), so interleaved rows can never be read as halves or the reverse, nor
gate as up (flashinfer_trtllm_mxfp4_moe's (up, gate) pairs from gpt-oss's (gate, up) ones). Sharded axes are read with the
logical per-rank stride of each segment (vllm#43865); for an interleaved source,
a rank reads one contiguous block of pairs.

`once` tensors (the row-parallel w2 bias) are real on rank 0 only: every other
rank's parameter is all zeros and `load` reads nothing, so after the all-reduce
the bias is counted exactly once.

What `load` derives from the axis table and the call's declarations alone (padded shape,
move plan, expected source shape, each read's index and shape) is computed once per axis
tuple and call shape and remembered (`_table`, `_prepared`): a quantized layer's 1152
per-expert loads share 9 plans (bench/quant_load_bench.py). Every check of the call's own
values and tensors still runs on every call.

Errors: `LayoutContractError` naming the tensor, the expected source shape and
what was wrong (shape, role, expert, layout, rank, destination).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch

from . import algebra
from .errors import LayoutContractError
from .layout import (
    Axis,
    Fill,
    check_data,
    check_dest,
    check_rank,
    empty,
    extent,
    fill_runs,
    overlaps,
    padded_shape,
    rank_runs,
    segment_length,
)

#: Most elements one read materialises (64 MiB of bf16); fused tensors are read in expert chunks.
CHUNK_ELEMENTS = 1 << 25
#: The layout words a fused gate/up checkpoint tensor may declare for its rows.
SOURCE_LAYOUTS = (algebra.Word.HALVES.value, algebra.Word.INTERLEAVE.value)
#: The segment order of a fused gate/up checkpoint tensor, unless `load` is told otherwise:
#: gate first (Qwen/Mixtral/Gemma-4 `[gate | up]`, gpt-oss `gate_up_proj`'s (gate, up) pairs,
#: vLLM 0.32 models/gpt_oss.py _load_weights_mxfp4's `w13` rows).
SOURCE_ROLES = ("gate", "up")
_WHOLE_ROLES = (None, "gate_up")


def _segmented(axes: tuple[Axis, ...]) -> int | None:
    """Index of the axis with more than one segment (w13.n), or None."""
    return next((i for i, a in enumerate(axes) if a.segments > 1), None)


def allocate(who: str, what: str, axes: tuple[Axis, ...], dtype: torch.dtype, fill: Fill | None,
             rank: object, tp_size: int, *, once: bool = False, out: object = None,
             tail_fill: Fill | None = None) -> torch.Tensor:
    """A rank's padded parameter: shape `padded_shape(axes)`, `dtype`, CPU, contiguous.

    Every pad position is written with `fill` exactly once (None: a contract's
    `fill uninit`, left as allocated), every position past a short rank's slice (a block
    shard's tail, in no pad) with `tail_fill` (None: `fill`); live positions are left for
    `load` (`layout.fill_runs`). A `once`
    tensor on a rank other than 0 is all zeros (it is never loaded there).
    `out`: a preallocated tensor of that shape and dtype to use instead (its pads are
    written, its live positions left as they are).
    Raises LayoutContractError on a bad rank or a wrong `out` (also an inference tensor outside
    torch.inference_mode(), which torch would refuse after a partial write).
    """
    r = check_rank(who, what, rank, tp_size)
    shape = padded_shape(axes)
    dst = empty(who, what, shape, dtype) if out is None else check_dest(who, f"out= for {what}", out, shape, dtype)
    with torch.no_grad():  # an nn.Parameter's data is written, not recorded (as engines' loaders do)
        if once and r != 0:
            dst.zero_()
            return dst
        fill_runs(dst, [rank_runs(a, r, tp_size) for a in axes], fill, tail_fill)
    return dst


# A move along one axis: read source [lo, hi), then take `sub` of it, into destination `dst`.
_Move = tuple[int, int, slice, slice | int]


def _dst_segment(axis: Axis, k: int, n: int) -> slice:
    """Destination positions of segment k's n live entries."""
    first = algebra.position(axis.word, axis.segments, k, 0, axis.logical, axis.padded)
    step = algebra.position(axis.word, axis.segments, k, 1, axis.logical, axis.padded) - first
    return slice(first, first + step * n, step)


def _moves(axis: Axis, r: int, tp: int, segs: tuple[int, ...] | None,
           source_layout: str, order: tuple[int, ...] = ()) -> tuple[int, list[_Move]]:
    """(source length, moves) of one destination axis for rank r.

    segs: for the segmented axis, the one segment the source holds (a role), or
    None when it holds every segment in `source_layout`. order: for a source holding
    every segment, the destination segment of its segment j (() the identity). A rank
    whose slice is empty (a block shard's last ranks) moves nothing.
    """
    order = order or tuple(range(axis.segments))
    full = segment_length(axis, tp)
    start, n = extent(axis, r, tp)
    every = slice(None)
    if axis.segments == 1 or segs is not None:
        dst = slice(0, n) if axis.segments == 1 else _dst_segment(axis, segs[0] if segs else 0, n)
        return full, ([(start, start + n, every, dst)] if n else [])
    if not n:
        return full * axis.segments, []
    if algebra.Word.parse(source_layout) is algebra.Word.INTERLEAVE:
        lo, hi = axis.segments * start, axis.segments * (start + n)
        if axis.word is algebra.Word.INTERLEAVE and order == tuple(range(axis.segments)):
            return full * axis.segments, [(lo, hi, every, slice(0, axis.segments * n))]
        return full * axis.segments, [(lo, hi, slice(j, None, axis.segments), _dst_segment(axis, order[j], n))
                                      for j in range(axis.segments)]
    return full * axis.segments, [(j * full + start, j * full + start + n, every, _dst_segment(axis, order[j], n))
                                  for j in range(axis.segments)]


@dataclass(frozen=True)
class _Prepared:
    """What one `load` call does, given everything it depends on but the tensors (see `_prepare`).

    expected: the source's shape (full checkpoint width, transposed when declared).
    reads: per read, (destination index, source index, sub-slice of the read or None,
    the read's shape): for a one-expert source the destination index lacks the experts
    axis (the expert is prepended per call).
    """

    expected: tuple[int, ...]
    reads: tuple[tuple[tuple[slice | int, ...], tuple[slice, ...], tuple[slice, ...] | None, tuple[int, ...]], ...]


@dataclass(frozen=True, eq=False)
class _Table:
    """What `load` derives from an axis table alone: the padded shape, the segmented axis, and
    the `_Prepared` reads of each call shape seen, keyed by `_prepare`'s other arguments."""

    padded: tuple[int, ...]
    seg: int | None
    prepared: dict[tuple[object, ...], _Prepared]
    #: (roles, role, source_layout, source_roles) -> (segs, order), each declaration checked once
    calls: dict[tuple[object, ...], tuple[tuple[int, ...] | None, tuple[int, ...]]]


#: id(axes) -> (axes, its _Table). The entry holds `axes` itself, so the id cannot be reused by
#: another tuple while it is here, and a hit is checked by identity (a generated module passes the
#: same axis tuple for every load of one tensor under one plan: `PlanChecker.memo`).
_TABLES: dict[int, tuple[tuple[Axis, ...], _Table]] = {}
_TABLES_LIMIT = 1024  # distinct axis tables remembered before the cache is cleared


def _table(axes: tuple[Axis, ...]) -> _Table:
    """The `_Table` of `axes` (computed once per axis tuple object; a list is never cached)."""
    hit = _TABLES.get(id(axes))
    if hit is not None and hit[0] is axes:
        return hit[1]
    table = _Table(padded_shape(axes), _segmented(axes), {}, {})
    if type(axes) is tuple:
        if len(_TABLES) >= _TABLES_LIMIT:
            _TABLES.clear()
        _TABLES[id(axes)] = (axes, table)
    return table


def _prepared(who: str, what: str, table: _Table, axes: tuple[Axis, ...], r: int, tp_size: int,
              segs: tuple[int, ...] | None, source_layout: str, order: tuple[int, ...], transposed: bool,
              one_expert: bool) -> _Prepared:
    """`_prepare(...)`, remembered in `table` by every argument it depends on (rank, tp size, the
    segment a role names, source layout, segment order, orientation, one expert or all): the
    9 x 128 per-expert loads of one quantized layer and rank share 9 entries."""
    key = (r, tp_size, segs, source_layout, order, transposed, one_expert)
    prep = table.prepared.get(key)
    if prep is None:
        prep = table.prepared[key] = _prepare(who, what, axes, r, tp_size, table.seg, segs, source_layout, order,
                                              transposed, one_expert)
    return prep


def _prepare(who: str, what: str, axes: tuple[Axis, ...], r: int, tp_size: int, seg: int | None,
             segs: tuple[int, ...] | None, source_layout: str, order: tuple[int, ...], transposed: bool,
             one_expert: bool) -> _Prepared:
    """The source shape `load` expects and its reads: the move plan of every axis (`_moves`), the
    experts axis split into chunks (`_chunked`), each read's index and shape. A pure function of
    its arguments (`_prepared` remembers it). Raises LayoutContractError when `transposed` is
    declared for a source of fewer than two dims (never remembered)."""
    plans = [_moves(a, r, tp_size, segs if i == seg else None, source_layout, order if i == seg else ())
             for i, a in enumerate(axes)]
    lengths = [n for n, _ in plans]
    moves: list[list[_Move]] = [m for _, m in plans]
    if one_expert:
        lengths, moves[0] = lengths[1:], [(0, 0, slice(None), 0)]  # the expert's index is prepended per call
    expected = list(lengths)
    if transposed:
        if len(expected) < 2:
            raise LayoutContractError(f"{who}: {what} has fewer than two source dims; it cannot be transposed")
        expected[-1], expected[-2] = expected[-2], expected[-1]
    reads = []
    for combo in _chunked(moves, one_expert):
        src_axes = combo[1:] if one_expert else combo
        index = [slice(lo, hi) for lo, hi, _, _ in src_axes]
        sub = [s for _, _, s, _ in src_axes]
        if transposed:
            index[-1], index[-2] = index[-2], index[-1]
            sub[-1], sub[-2] = sub[-2], sub[-1]
        want = tuple(len(range(*s.indices(n))) for s, n in zip(index, expected, strict=True))
        dst = tuple(d for _, _, _, d in (combo[1:] if one_expert else combo))
        reads.append((dst, tuple(index), tuple(sub) if any(s != slice(None) for s in sub) else None, want))
    return _Prepared(tuple(expected), tuple(reads))


def _segment_order(who: str, what: str, roles: tuple[str, ...], source_roles: object,
                   segments: int) -> tuple[int, ...]:
    """The contract segment of each segment of a fused source: roles.index(source_roles[j]).
    Raises LayoutContractError when `source_roles` is not an ordering of the contract's roles."""
    if not roles:
        return tuple(range(segments))
    if not isinstance(source_roles, tuple) or sorted(map(str, source_roles)) != sorted(roles) \
            or len(source_roles) != len(roles):
        raise LayoutContractError(f"{who}: source_roles={source_roles!r} for {what}; a fused source holds each "
                                  f"of {', '.join(roles)} once, in its own order (default {SOURCE_ROLES})")
    return tuple(roles.index(str(role)) for role in source_roles)


def _source_shape(who: str, what: str, src: object) -> tuple[int, ...] | None:
    if isinstance(src, torch.Tensor):
        if src.is_nested:
            raise LayoutContractError(f"{who}: the source for {what} is a nested tensor; pass a dense (strided) "
                                      "tensor")
        return tuple(src.shape)
    get_shape = getattr(src, "get_shape", None)
    if callable(get_shape):
        try:
            return tuple(map(int, get_shape()))
        except Exception:  # a foreign object whose get_shape fails is not a source
            return None
    return None


def _read(src: Any, index: tuple[slice, ...], want: tuple[int, ...]) -> torch.Tensor:
    """Read `src[index]` (a slice object reads only that region of the file: safetensors'
    materialises it, as a `MappedSlice` does with `os.preadv`).

    The read must be a torch tensor of exactly `want`, the requested region's shape in the
    source's checked shape (a foreign slice object that returns anything else is refused,
    never broadcast)."""
    part = src[index]
    if type(part) is torch.Tensor and part.layout == torch.strided and not part.is_nested and part.shape == want \
            and not part.is_meta:
        return part  # the common case, in one test (1152 reads per quantized layer)
    if not isinstance(part, torch.Tensor):
        raise LayoutContractError(f"reading a slice gave {type(part).__name__}, not a torch tensor "
                                  "(open the checkpoint with safe_open(..., framework='pt'))")
    if part.is_nested or part.layout != torch.strided:
        kind = "a nested tensor" if part.is_nested else f"a tensor of layout {part.layout}"
        raise LayoutContractError(f"reading the slice {_show(index)} gave {kind}, not a dense (strided) one")
    if part.is_meta:
        raise LayoutContractError(f"reading the slice {_show(index)} gave a meta tensor (no data)")
    if part.shape != want:
        raise LayoutContractError(f"reading the slice {_show(index)} gave shape {tuple(part.shape)}, expected "
                                  f"{want}: the source does not read what its get_shape() promises")
    return part


def _show(index: tuple[slice, ...]) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in index) + "]"


#: Source dtypes a floating-point parameter may be loaded from (cast on copy, as engines do).
_CASTABLE = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def _check_source_dtype(who: str, what: str, src: object, dtype: torch.dtype) -> None:
    """A source of another dtype is cast on copy only between float32/bfloat16/float16/float64
    (a bf16 checkpoint into a float32 parameter); codes, packed storage and float8 must come in
    their own dtype (casting 2.0 into a uint8 E8M0 scale would store code 2, which is 2^-125)."""
    src_dtype: object = src.dtype if isinstance(src, torch.Tensor) else None
    get_dtype = getattr(src, "get_dtype", None)
    if src_dtype is None and callable(get_dtype):  # a safetensors slice names it ("BF16", "U8", ...)
        try:
            src_dtype = SAFETENSORS_DTYPES.get(str(get_dtype()))
        except Exception:  # a foreign object whose get_dtype fails: its reads are checked instead
            src_dtype = None
    if not isinstance(src_dtype, torch.dtype) or src_dtype == dtype:
        return
    if dtype in _CASTABLE and src_dtype in _CASTABLE:
        return
    hint = "; an E8M0 byte is its code: pass .view(torch.uint8)" \
        if (src_dtype, dtype) == (torch.float8_e8m0fnu, torch.uint8) else ""
    raise LayoutContractError(f"{who}: source for {what} has dtype {src_dtype}, expected {dtype} (only "
                              "float32/bfloat16/float16 sources are cast; codes, packed and float8 storage are "
                              f"loaded as stored){hint}")


#: safetensors dtype name -> torch dtype (the names of the format's README); also the dtypes the
#: checkpoint reader views a file's bytes as (layoutc/tools/checkpoints/reader.py)
SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
                       "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                       "U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16, "U8": torch.uint8,
                       "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
                       "F8_E8M0": torch.float8_e8m0fnu, "BOOL": torch.bool}


def load(who: str, what: str, dst: object, src: object, axes: tuple[Axis, ...], dtype: torch.dtype,
         rank: object, tp_size: int, *, roles: tuple[str, ...] = (), expert: object = None,
         role: str | None = None, transposed: bool = False, source_layout: str = SOURCE_LAYOUTS[0],
         once: bool = False, source_roles: tuple[str, ...] = SOURCE_ROLES) -> None:
    """Copy rank `rank`'s slice of one checkpoint tensor into the padded parameter `dst`.

    dst: from `allocate` (padded shape, `dtype`, contiguous CPU).
    src: a torch tensor or a safetensors slice, in the checkpoint's dtype: cast on copy between
    float32/bfloat16/float16 only; codes, packed storage and float8 come in `dtype` itself.
    Its expected shape, at full checkpoint width (sharded axes at their full length,
    `layout.full_shape`), is the contract tensor's axes in order, with
    - the experts axis (axis 0) dropped when `expert` is an int (one expert's tensor);
    - the segmented axis (w13.n) holding one segment when `role` names one of `roles`
      (e.g. "gate" or "up"), or all of them in `source_layout` when `role` is None
      or "gate_up";
    - the last two dims swapped when `transposed`.
    roles: the segment names of the segmented axis, in contract order (("gate", "up") or
    ("up", "gate")).
    source_roles: the segment order of a fused source (`role` None or "gate_up"): its
    segment j, in `source_layout`, is loaded into the contract's segment of role
    source_roles[j] (default SOURCE_ROLES, gate first).
    Only pad-free live positions of `dst` are written, each loaded position once.
    The copy runs under torch.no_grad(): `dst` may be an nn.Parameter that requires grad
    (its data is written, as engines' weight loaders write `param.data`), and a source that
    requires grad leaves `dst` a leaf with no graph to it.
    Raises LayoutContractError on a wrong shape (saying when the transposed shape would
    match), a source dtype that cannot be cast, a meta source (no data), a source sharing
    memory with `dst` (a slice object's reads are checked as each is made; another mapping of
    the same file cannot be seen and must not be passed), a source or read that is not dense or
    whose address cannot be read (a tensor subclass, a zero tensor), an inference-tensor `dst`
    outside torch.inference_mode(), a read of the
    wrong shape, role, expert index, source layout, source
    roles that are not an ordering of `roles`, rank or destination.
    """
    r = rank if type(rank) is int and 0 <= rank < tp_size else check_rank(who, what, rank, tp_size)
    table = _table(axes)
    dst_t = check_dest(who, f"destination for {what}", dst, table.padded, dtype)
    segs, order = _call_shape(who, what, table, axes, roles, role, source_layout, source_roles)
    e: int | None = None
    if expert is not None:
        if (type(expert) is not int and (isinstance(expert, bool) or not isinstance(expert, int))) \
                or not 0 <= expert < axes[0].logical:
            raise LayoutContractError(f"{who}: expert={expert!r} for {what} must be an int in "
                                      f"0..{axes[0].logical - 1}")
        e = expert
    prep = _prepared(who, what, table, axes, r, tp_size, segs, source_layout, order, bool(transposed), e is not None)
    _check_source_dtype(who, what, src, dtype)
    shape = _source_shape(who, what, src)
    if shape is None:
        raise LayoutContractError(f"{who}: the source for {what} must be a torch.Tensor or a safetensors "
                                  f"slice (get_slice), got {type(src).__name__}")
    expected = prep.expected
    if shape != expected:
        hint = ""
        if len(shape) >= 2 and (*shape[:-2], shape[-1], shape[-2]) == expected:
            hint = f"; it matches with the last two dims swapped: declare transposed={not transposed}"
        raise LayoutContractError(f"{who}: source for {what} (rank {r}, expert={e}, role={role}) has shape "
                                  f"{shape}, expected {expected}{hint}")
    grad = dst_t.requires_grad
    if isinstance(src, torch.Tensor):
        if src.is_meta:
            raise LayoutContractError(f"{who}: the source for {what} is a meta tensor (shape {shape}, no data); "
                                      "load the checkpoint's tensor itself")
        if src.layout != torch.strided:
            raise LayoutContractError(f"{who}: the source for {what} has layout {src.layout}; pass a dense "
                                      f"(strided) tensor of shape {shape} (e.g. .to_dense())")
        check_data(who, f"the source for {what}", src)
        # the copy would overwrite source rows before reading them
        if src.is_cpu and overlaps(who, f"the source for {what} and its destination", dst_t, src):
            raise LayoutContractError(f"{who}: the source for {what} shares memory with its destination; "
                                      "load from a separate tensor (e.g. .clone())")
        grad = grad or src.requires_grad
    if once and r != 0:
        return  # the parameter is zeros on this rank: the bias is added once, on rank 0
    sliced = not isinstance(src, torch.Tensor)  # a slice object: what it reads is only known once read
    read_what = f"a read of the source slice for {what} and its destination"
    for dst_index, index, sub, want in prep.reads:
        part = _read(src, index, want)
        if sliced and part.is_cpu and overlaps(who, read_what, dst_t, part):
            raise LayoutContractError(f"{who}: a read of the source slice for {what} shares memory with its "
                                      "destination; load from a separate tensor or file")
        if part.dtype != dst_t.dtype:  # each read's dtype is checked as the declared one is (a
            # slice whose get_dtype() names no known dtype is judged by what it reads)
            _check_source_dtype(who, what, part, dst_t.dtype)
        if sub is not None:
            part = part[sub]
        if transposed:
            part = part.transpose(-1, -2)
        # dst's data is written, never recorded: no graph to a source that requires grad (a slice
        # object's reads are only known once made); when neither side requires grad, autograd
        # records nothing and the guard is skipped
        with torch.no_grad() if grad or part.requires_grad else contextlib.nullcontext():
            dst_t[dst_index if e is None else (e, *dst_index)].copy_(part)


def _call_shape(who: str, what: str, table: _Table, axes: tuple[Axis, ...], roles: tuple[str, ...],
                role: object, source_layout: object, source_roles: object
                ) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
    """(segments the call writes or None for all, segment order of a fused source) for one
    call's role declarations, checked once per distinct declaration and remembered in `table`.
    Raises LayoutContractError on an unknown source layout, a role that is not one of `roles`
    (or "down" for an unsegmented tensor, None / "gate_up" for all), or `source_roles` that
    are not an ordering of `roles`."""
    key: tuple[object, ...] | None = (roles, role, source_layout, source_roles)
    try:
        hit = table.calls.get(key)  # type: ignore[arg-type]
    except TypeError:  # an unhashable declaration: checked below, never remembered
        key, hit = None, None
    if hit is not None:
        return hit
    if source_layout not in SOURCE_LAYOUTS:
        raise LayoutContractError(f"{who}: source_layout={source_layout!r} for {what}; declare one of "
                                  f"{', '.join(SOURCE_LAYOUTS)}")
    seg = table.seg
    segs: tuple[int, ...] | None
    if role in _WHOLE_ROLES or (role == "down" and seg is None):
        segs = None
    elif seg is not None and role in roles:
        segs = (roles.index(str(role)),)
    else:
        allowed = (*roles, "gate_up", "None") if seg is not None else ("down", "None")
        raise LayoutContractError(f"{who}: role={role!r} is not a role of {what}; use one of "
                                  f"{', '.join(allowed)}")
    order = _segment_order(who, what, roles, source_roles, axes[seg].segments) \
        if seg is not None and segs is None else ()
    if key is not None:
        table.calls[key] = (segs, order)
    return segs, order


def _chunked(moves: list[list[_Move]], one_expert: bool) -> list[tuple[_Move, ...]]:
    """Every combination of per-axis moves, the experts axis split so one read stays under CHUNK_ELEMENTS."""
    if one_expert or not moves or not moves[0] or any(
            sub != slice(None) or not isinstance(d, slice) or d.step not in (None, 1) for _, _, sub, d in moves[0]):
        return list(itertools.product(*moves))
    per_expert = max(1, math.prod(max((hi - lo for lo, hi, _, _ in m), default=0) for m in moves[1:]))
    step = max(1, CHUNK_ELEMENTS // per_expert)
    first: list[_Move] = []
    for lo, hi, sub, d in moves[0]:
        assert isinstance(d, slice)
        for s in range(lo, hi, step):
            t = min(hi, s + step)
            first.append((s, t, sub, slice((d.start or 0) + s - lo, (d.start or 0) + t - lo)))
    return list(itertools.product(first, *moves[1:]))
