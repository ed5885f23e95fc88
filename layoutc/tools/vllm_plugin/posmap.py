"""Where each loaded element lands in the prepacked weights: the contract's position map (issue 44 item 4).

Check mode used to redo vLLM's work to have something to compare with: the contract's `pad` of the
loaded weights, then `prepack_padded` (`_C::prepack_moe_weight`), then a comparison; at gemma-4's real
width that was three times vLLM's own method. The map says the same thing without the kernel and without
a padded copy:

- **pad**: the padded axis's layout word (the generated module's LAYOUT: `axis_table(plan)`) split into
  runs by the runtime algebra (`algebra.runs`: each live run's source and destination, each pad run);
  the pad positions hold the tensor's `fill`, read from the generated `pad` (`ep.fill_of`) on one expert;
- **prepack**: the contract's glue op (`kernel(gen).prepack_padded`, the real `_C::prepack_moe_weight`)
  run once per plan on one expert of position codes (base-256 digits, exact in any float dtype), which
  must be a permutation that is one strided view: digits (size, padded stride, packed stride) with
  every digit inside the row axis or inside the column axis (vec: `[rows / 16, cols, 16]`). The fitted
  digits are held to the probe position by position; anything else gives no map, and the caller falls
  back to the contract's pad and prepack.

`expected(pm, logical)` then writes the loaded weights straight into the contract's prepacked order
(a strided copy per live run, the fill into each pad run): the snapshot check mode keeps, before vLLM's
method replaces the weights. After it, vLLM's prepacked tensor must equal it word for word: every live
element where the contract puts it and every pad position holding the fill.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from layoutc.runtime import algebra
from layoutc.runtime.errors import LayoutContractError
from layoutc.tools.contract_module import kernel_of, layout_of
from layoutc.tools.vllm_plugin import ep


@dataclass(frozen=True)
class PositionMap:
    """Where the contract puts each element of one projection's weight, one expert (every expert alike).

    shape: the padded weight [E, R, C] (the prepacked tensor has this shape and holds a permutation
    of it per expert). sizes / packed_strides: the digits of one expert's padded positions, outer
    first (padded strides descending); `packed.as_strided([E, *sizes], [R * C, *packed_strides])`
    is the prepacked tensor read in padded order. row_digits: how many leading digits index R.
    dim: the padded axis (1: rows, w13's n; 2: columns, w2's k). copies: (logical start, padded
    start, length) of each live run on that axis; pads: [lo, hi) of each pad run; fill: their value.
    """

    shape: tuple[int, int, int]
    sizes: tuple[int, ...]
    packed_strides: tuple[int, ...]
    row_digits: int
    dim: int
    copies: tuple[tuple[int, int, int], ...]
    pads: tuple[tuple[int, int], ...]
    fill: float


def fit_digits(src: torch.Tensor, rows: int, cols: int) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """(sizes, packed strides, row digits) of a permutation `src` (packed position j holds padded
    position src[j], one expert of rows x cols) that is one strided view, or None.

    Digits are read from the packed side, innermost first (a run of constant padded step), then
    sorted by padded stride; the fit is held to `src` position by position."""
    n = rows * cols
    if src.numel() != n or n == 0 or int(src[0]) != 0:
        return None
    digits: list[tuple[int, int, int]] = []  # (size, padded stride, packed stride)
    step = 1
    while step < n:
        stride = int(src[step])
        values = src[::step]
        run = int(values.numel())
        wrong = torch.nonzero(values != torch.arange(run, dtype=torch.int64) * stride)
        if wrong.numel():
            run = int(wrong[0])
        while run > 1 and n % (step * run):
            run -= 1
        if run <= 1:
            return None
        digits.append((run, stride, step))
        step *= run
    digits.sort(key=lambda d: -d[1])
    sizes = tuple(d[0] for d in digits)
    padded_strides = tuple(d[1] for d in digits)
    packed_strides = tuple(d[2] for d in digits)
    want = torch.arange(n, dtype=torch.int64).as_strided(sizes, padded_strides)
    got = torch.empty(n, dtype=torch.int64)
    got.as_strided(sizes, packed_strides).copy_(want)
    if not torch.equal(got, src):
        return None
    row_digits = sum(1 for s in padded_strides if s >= cols)
    # every digit inside the rows (a multiple of cols) or inside the columns (never crossing a row)
    if any(s % cols for s in padded_strides[:row_digits]) or \
            any(s * z > cols for z, s in zip(sizes[row_digits:], padded_strides[row_digits:], strict=True)):
        return None
    if math.prod(sizes[:row_digits]) != rows or math.prod(sizes[row_digits:]) != cols:
        return None
    return sizes, packed_strides, row_digits


def probe(gen: ModuleType, one: Any, dtype: torch.dtype) -> dict[str, torch.Tensor | None]:
    """Packed position -> padded position of the contract's prepack of one expert (`one`: a plan
    with num_experts 1), for "w13" and "w2": `prepack_padded` of position codes, one base-256 digit
    at a time (exact in any float dtype), both weights in each call. A projection whose result is
    not a permutation (the op does more than move elements) maps to None."""
    lay = layout_of(gen)
    shapes = {p: tuple(int(s) for s in lay.weight(p).shapes(one)[1]) for p in ("w13", "w2")}
    sizes = {p: math.prod(shape) for p, shape in shapes.items()}
    digits = max(1, (max(max(sizes.values()) - 1, 1).bit_length() + 7) // 8)
    index = {p: torch.arange(n, dtype=torch.int32) for p, n in sizes.items()}
    src = {p: torch.zeros(n, dtype=torch.int64) for p, n in sizes.items()}
    prepack_padded = kernel_of(lay).prepack_padded
    for d in range(digits):
        codes = {p: ((index[p] >> (8 * d)) & 255).to(dtype).reshape(shapes[p]) for p in shapes}
        packed = prepack_padded(codes["w13"], codes["w2"], one)
        for p, weight in zip(("w13", "w2"), packed, strict=True):
            src[p] += weight.data.reshape(-1).to(torch.int64) << (8 * d)
    out: dict[str, torch.Tensor | None] = {}
    for p, found in src.items():
        n = sizes[p]
        ok = int(found.min()) >= 0 and int(found.max()) < n and bool((torch.bincount(found, minlength=n) == 1).all())
        out[p] = found if ok else None
    return out


def position_map(gen: ModuleType, plan: Any, projection: str, dtype: torch.dtype) -> PositionMap | None:
    """The position map of `projection` ("w13" | "w2") under `plan`, or None where the contract's
    prepack is not one strided view of its pad (the caller then pads and prepacks to compare).
    Cached per (contract, plan, dtype), both projections from one probe: every layer of a model
    shares its plan."""
    try:
        key = (gen.__name__, plan, dtype)
        hash(key)
    except TypeError:
        return _build(gen, plan, dtype).get(projection)
    return _cached(*key).get(projection)


@functools.lru_cache(maxsize=16)
def _cached(name: str, plan: Any, dtype: torch.dtype) -> dict[str, PositionMap | None]:
    return _build(sys.modules[name], plan, dtype)


def _build(gen: ModuleType, plan: Any, dtype: torch.dtype) -> dict[str, PositionMap | None]:
    lay = layout_of(gen)  # the caller (check.module) has held gen to a LAYOUT and a glue
    try:
        one = lay.replan(plan, num_experts=1)
    except (gen.LayoutContractError, LayoutContractError):
        return {}
    found = probe(gen, one, dtype)
    maps: dict[str, PositionMap | None] = {}
    for projection, src in found.items():
        entry = lay.weight(projection)
        where = padded_axis(entry, plan)
        shape = tuple(int(s) for s in entry.shapes(plan)[1])
        if src is None or where is None or where[0] not in (1, 2) or len(shape) != 3:
            maps[projection] = None
            continue
        fit = fit_digits(src, shape[1], shape[2])
        if fit is None:
            maps[projection] = None
            continue
        dim, axis = where
        word = algebra.Word.parse(axis.layout)
        copies, pads, _ = algebra.runs(word, int(axis.segments), int(axis.logical), int(axis.padded))
        spans = sorted([(dest, dest + length) for _, dest, length in copies] + [(lo, hi) for lo, hi in pads])
        ends = [0] + [hi for _, hi in spans]
        if [lo for lo, _ in spans] != ends[:-1] or ends[-1] != shape[dim]:
            maps[projection] = None  # the runs do not tile the axis: positions nothing would write
            continue
        fill = ep.fill_of(lay, entry, one, dtype) if pads else 0.0
        maps[projection] = PositionMap(shape=(shape[0], shape[1], shape[2]), sizes=fit[0], packed_strides=fit[1],
                                       row_digits=fit[2], dim=dim, copies=tuple(copies), pads=tuple(pads), fill=fill)
    return maps


def padded_axis(entry: Any, plan: Any) -> tuple[int, Any] | None:
    """(dim, axis) of the first padded axis of `entry` under `plan` (its layout word pads), or None."""
    for i, axis in enumerate(entry.axis_table(plan)):
        if algebra.Word.parse(axis.layout).padded:
            return i, axis
    return None


def padded_view(pm: PositionMap, packed: torch.Tensor) -> torch.Tensor:
    """`packed` (contiguous [E, R, C]) read in padded order: [E, *row digits, *column digits], a view."""
    experts, rows, cols = packed.shape
    return packed.as_strided((experts, *pm.sizes), (rows * cols, *pm.packed_strides), packed.storage_offset())


def expected(pm: PositionMap, logical: torch.Tensor) -> torch.Tensor:
    """What the contract's pad then prepack make of `logical` ([E, R_logical, C] or [E, R, C_logical],
    as the loader left it), written straight into prepacked order: a contiguous [E, R, C], every
    position written (the runs tile the axis: `_build`), in a spare buffer of that shape when there
    is one (`give_back`), else a new one."""
    experts = int(logical.shape[0])
    out = _take((experts, pm.shape[1], pm.shape[2]), logical.dtype)
    view = padded_view(pm, out)
    for lo, hi in pm.pads:
        _put(pm, view, lo, hi - lo, None)
    for source, dest, length in pm.copies:
        part = logical.narrow(pm.dim, source, length)
        _put(pm, view, dest, length, part)
    return out


# Snapshot buffers handed back after a layer's check, for the next layer of the same shape: vLLM
# processes every layer's weights in one step (base_loader.process_weights_after_loading), so reusing
# them spares each later layer the first-touch page faults of a fresh buffer (as long as the copy
# itself on this VM) at no cost in peak memory; hook.py drops them when the step ends.
_SPARE: dict[tuple[tuple[int, ...], torch.dtype], torch.Tensor] = {}


def _take(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    spare = _SPARE.pop((shape, dtype), None)
    return spare if spare is not None else torch.empty(shape, dtype=dtype)


def give_back(*buffers: torch.Tensor) -> None:
    """Keep `buffers` (snapshots no longer needed) for the next layer of the same shape and dtype."""
    for t in buffers:
        if t.is_contiguous() and t.storage_offset() == 0:
            _SPARE[(tuple(t.shape), t.dtype)] = t


def drop_spares() -> None:
    """Free the buffers `give_back` kept (the end of vLLM's weight-processing step)."""
    _SPARE.clear()


def logical_of(pm: PositionMap, packed: torch.Tensor) -> torch.Tensor:
    """The loaded weights `expected` was written from: the live runs of `packed` in logical order (to
    describe a difference)."""
    padded = padded_view(pm, packed).reshape(pm.shape if packed.shape[0] == pm.shape[0] else
                                             (packed.shape[0], *pm.shape[1:]))
    parts = sorted(pm.copies)
    return torch.cat([padded.narrow(pm.dim, dest, length) for _, dest, length in parts], dim=pm.dim)


def _put(pm: PositionMap, view: torch.Tensor, lo: int, length: int, part: torch.Tensor | None) -> None:
    """Write `part` (or the fill, when None) at positions [lo, lo + length) of the padded axis, through
    the digits of that axis (a head, a body of whole inner blocks, a tail, recursively)."""
    if pm.dim == 1:
        _put_digits(view, 1, pm.sizes[:pm.row_digits], pm.sizes[pm.row_digits:], lo, length, part, pm)
    else:
        _put_digits(view, 1 + pm.row_digits, pm.sizes[pm.row_digits:], (), lo, length, part, pm)


def _put_digits(view: torch.Tensor, first: int, digits: tuple[int, ...], cols: tuple[int, ...], lo: int,
                length: int, part: torch.Tensor | None, pm: PositionMap) -> None:
    if length <= 0:
        return
    inner = math.prod(digits[1:])
    if len(digits) == 1 or (lo % inner == 0 and length % inner == 0):
        target = view.narrow(first, lo // inner, length // inner)
        if part is None:
            target.fill_(pm.fill)
            return
        target.copy_(_shaped(part, pm, first, digits, length, cols))
        return
    head = min(length, (-lo) % inner)
    if head:
        _put_digits(view.select(first, lo // inner), first, digits[1:], cols, lo % inner, head,
                    None if part is None else part.narrow(pm.dim, 0, head), pm)
    body = (length - head) // inner * inner
    if body:
        _put_digits(view, first, digits, cols, lo + head, body,
                    None if part is None else part.narrow(pm.dim, head, body), pm)
    tail = length - head - body
    if tail:
        start = lo + head + body
        _put_digits(view.select(first, start // inner), first, digits[1:], cols, 0, tail,
                    None if part is None else part.narrow(pm.dim, head + body, tail), pm)


def _shaped(part: torch.Tensor, pm: PositionMap, first: int, digits: tuple[int, ...], length: int,
            cols: tuple[int, ...]) -> torch.Tensor:
    """`part` ([E, length, C] or [E, R, length]) split into the target's digits (a view where
    `part` is contiguous along them: the loader's tensors are)."""
    experts = part.shape[0]
    inner = math.prod(digits[1:])
    axis = (length // inner, *digits[1:])
    if pm.dim == 1:
        return part.reshape(experts, *axis, *cols)
    rows = pm.sizes[:pm.row_digits]
    return part.reshape(experts, *rows, *axis)
