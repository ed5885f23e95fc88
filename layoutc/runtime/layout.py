"""Pad, unpad and shard a tensor by its axis table.

Each contract tensor is described by one `Axis` per dimension, in the tensor's
axis order, rendered by the compiler from the contract's `axis` clauses. Sizes
are element counts in storage units (packed axes count storage elements; groups
axes count groups). An axis holds `segments` runs of `logical` live entries, each
placed in a run of `padded` positions:

- `none`: never padded (logical == padded);
- `pad`: one run, pad at the end;
- `halves`: segment k lives at [k * padded, k * padded + logical) ([gate | up]);
- `concat`: segments are contiguous, pad after the last ([gate | up | pad]);
- `interleave`: segment k of entry i lives at 2 * i + k, pad pairs after the last pair.

`sharded` axes are split across tensor-parallel ranks with the logical per-rank
stride (vllm#43865): rank r reads entries [min(r * logical, full), min((r + 1) *
logical, full)) of each segment of the full checkpoint (for `interleave`, a
contiguous block of pairs), `full` being the segment's length there. An even split
has full == tp_size * logical. A block shard (a contract's `shard ... in blocks of
B`, e.g. gpt-oss MXFP4 in vLLM's `GptOssModel._load_weights_mxfp4`) may have
full < tp_size * logical: the last ranks' slices are shorter or empty, and the rest
of their logical run holds the tensor's fill, like a pad.

Every function checks its inputs and raises `LayoutContractError` naming the
tensor and the expected shape; nothing writes outside the tensor it returns.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass

import torch

from .errors import LayoutContractError


@dataclass(frozen=True)
class Axis:
    """One axis of a contract tensor (see the module docstring for the layouts)."""

    name: str
    layout: str  # none | pad | halves | concat | interleave
    segments: int
    logical: int
    padded: int
    sharded: bool  # split across tensor-parallel ranks
    # sharded axes: one segment's length in the full checkpoint (storage units); None:
    # an even split, tp_size * logical
    full: int | None = None


def segment_length(axis: Axis, tp_size: int) -> int:
    """One segment's length in the full checkpoint tensor (the rank's own for unsharded axes)."""
    if not axis.sharded:
        return axis.logical
    return axis.logical * tp_size if axis.full is None else axis.full


def extent(axis: Axis, rank: int, tp_size: int) -> tuple[int, int]:
    """(start, length) of rank `rank`'s slice of one segment of the full checkpoint axis."""
    if not axis.sharded:
        return 0, axis.logical
    full = segment_length(axis, tp_size)
    start = min(rank * axis.logical, full)
    return start, min(axis.logical, full - start)


def logical_shape(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """The tensor's logical shape (what the checkpoint holds for one rank)."""
    return tuple(a.segments * a.logical for a in axes)


def padded_shape(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """The tensor's padded shape (what the kernel reads)."""
    return tuple(a.segments * a.padded for a in axes)


def full_shape(axes: tuple[Axis, ...], tp_size: int) -> tuple[int, ...]:
    """The full checkpoint shape that `shard` reads (sharded axes at their full length)."""
    return tuple(a.segments * segment_length(a, tp_size) for a in axes)


#: One axis's (copies, fills): (source start, destination start, length) of each live run,
#: and [lo, hi) of each run holding the fill.
Runs = tuple[list[tuple[int, int, int]], list[tuple[int, int]]]


def runs(axis: Axis, start: int = 0, live: int | None = None, stride: int | None = None) -> Runs:
    """(copies, fills) of one axis whose source segments hold entries [start, start + live)
    of `stride`-long segments (default: the whole logical run, segments `logical` apart).

    copies: (source start, destination start, length) of each live run; fills: [lo, hi)
    of each run holding the fill (the pad, and past a short rank's slice).
    """
    n = axis.logical if live is None else live
    seg = axis.logical if stride is None else stride
    if axis.layout == "interleave":
        k = axis.segments
        copied = [(k * start, 0, k * n)] if n else []
        return copied, ([(k * n, k * axis.padded)] if n < axis.padded else [])
    if axis.layout == "concat":
        copied = [(j * seg + start, j * axis.logical, n) for j in range(axis.segments)] if n else []
        tails = [(j * axis.logical + n, (j + 1) * axis.logical) for j in range(axis.segments) if n < axis.logical]
        pad = [(axis.segments * axis.logical, axis.segments * axis.padded)] if axis.padded > axis.logical else []
        return copied, tails + pad
    copied = [(j * seg + start, j * axis.padded, n) for j in range(axis.segments)] if n else []
    return copied, [(j * axis.padded + n, (j + 1) * axis.padded) for j in range(axis.segments) if n < axis.padded]


def rank_runs(axis: Axis, rank: int, tp_size: int) -> Runs:
    """(copies, fills) of rank `rank`'s slice of the full checkpoint axis (see `runs`)."""
    start, live = extent(axis, rank, tp_size)
    return runs(axis, start, live, segment_length(axis, tp_size))


def copies(axis: Axis) -> list[tuple[int, int, int]]:
    """(source start, destination start, length) of each logical run of `axis`."""
    return runs(axis)[0]


def fills(axis: Axis) -> list[tuple[int, int]]:
    """[start, stop) of each pad run of `axis`."""
    return runs(axis)[1]


def check_tensor(who: str, what: str, t: object, shape: tuple[int, ...], dtype: torch.dtype,
                 contiguous: bool = True) -> torch.Tensor:
    """`t` as a dense (strided) CPU tensor of `shape` and `dtype`; contiguous unless told otherwise.

    Raises LayoutContractError naming `what`, the expected shape and what was wrong
    (not a tensor, sparse or other layout, shape, dtype, device, contiguity).
    """
    if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.shape == shape and t.dtype == dtype \
            and t.is_cpu and (not contiguous or t.is_contiguous()):
        return t  # the common case, in one test (this runs on every forward)
    if not isinstance(t, torch.Tensor):
        raise LayoutContractError(f"{who}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise LayoutContractError(f"{who}: {what} has layout {t.layout}; pass a dense (strided) tensor "
                                  f"of shape {shape} (e.g. .to_dense())")
    if tuple(t.shape) != shape:
        raise LayoutContractError(f"{who}: {what} has shape {tuple(t.shape)}, expected {shape}")
    if t.dtype != dtype:
        raise LayoutContractError(f"{who}: {what} has dtype {t.dtype}, expected {dtype} (shape {shape})")
    if t.device.type != "cpu":
        raise LayoutContractError(f"{who}: {what} is on {t.device}, expected a CPU tensor (shape {shape})")
    raise LayoutContractError(f"{who}: {what} must be contiguous (shape {shape})")


def byte_range(t: torch.Tensor) -> tuple[int, int]:
    """[first, last + 1) byte address that `t` can touch (empty tensors: (0, 0))."""
    if t.numel() == 0:
        return (0, 0)
    start = t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()
    extent = sum((int(size) - 1) * abs(int(stride)) for size, stride in zip(t.shape, t.stride(), strict=True))
    return (int(start), int(start) + (extent + 1) * t.element_size())


def check_out(who: str, what: str, out: object, source: torch.Tensor, shape: tuple[int, ...],
              dtype: torch.dtype) -> torch.Tensor:
    """`out=`: a contiguous CPU tensor of the padded shape, not requiring grad, sharing no memory with `source`."""
    checked = check_tensor(who, f"out= for {what}", out, shape, dtype)
    if checked.requires_grad:
        raise LayoutContractError(f"{who}: out= for {what} requires grad; pass a plain tensor")
    a, b = byte_range(checked), byte_range(source)
    if a[0] < b[1] and b[0] < a[1]:
        raise LayoutContractError(f"{who}: out= for {what} overlaps the input's memory; pass a separate buffer")
    return checked


def check_rank(who: str, what: str, rank: object, tp_size: int) -> int:
    """A rank in 0..tp_size-1 (ints and numpy integers; not bools)."""
    if isinstance(rank, bool):
        raise LayoutContractError(f"{who}: rank={rank!r} must be an integer for {what}")
    try:
        value = operator.index(rank)  # type: ignore[arg-type]
    except TypeError:
        raise LayoutContractError(f"{who}: rank={rank!r} must be an integer for {what}") from None
    if not 0 <= value < tp_size:
        raise LayoutContractError(f"{who}: rank={value} is outside 0..{tp_size - 1} for {what}")
    return int(value)


def scatter(src: torch.Tensor, dst: torch.Tensor, plan: list[Runs], fill: float | None) -> None:
    """Copy each live run of `src` into `dst` once, then fill each fill run once (`fill_runs`).

    plan: per axis, (copies, fills) from `runs` / `rank_runs`. `fill` None (a contract's
    `fill uninit`) leaves the pad as allocated.
    """
    for combo in itertools.product(*[c for c, _ in plan]):
        src_index = tuple(slice(s, s + n) for s, _, n in combo)
        dst_index = tuple(slice(d, d + n) for _, d, n in combo)
        dst[dst_index].copy_(src[src_index])
    if fill is not None:
        fill_runs(dst, plan, fill)


def fill_runs(dst: torch.Tensor, plan: list[Runs], fill: float) -> None:
    """Write `fill` into every fill position of `dst` exactly once, touching no live one.

    plan: per axis, (copies, fills) from `runs` / `rank_runs`. A position is a fill
    position when any axis is in a fill run there (a pad, or past a short rank's slice);
    it is written by the first such axis (earlier axes restricted to their live runs).
    A zero fill uses `zero_` (a memset per run) rather than `fill_`.
    """
    live = [c for c, _ in plan]
    for d, (_, axis_fills) in enumerate(plan):
        for lo, hi in axis_fills:
            for covered in itertools.product(*live[:d]):
                index = (*(slice(dd, dd + n) for _, dd, n in covered), slice(lo, hi))
                piece = dst[index]
                if fill == 0:
                    piece.zero_()
                else:
                    piece.fill_(fill)


def pad(who: str, what: str, t: object, axes: tuple[Axis, ...], dtype: torch.dtype, fill: float | None,
        out: torch.Tensor | None) -> torch.Tensor:
    """Logical -> padded. Returns `t` itself when nothing is padded and `out` is None."""
    logical, padded = logical_shape(axes), padded_shape(axes)
    src = check_tensor(who, what, t, logical, dtype, contiguous=False)
    if out is None:
        if logical == padded:
            return src
        out = torch.empty(padded, dtype=dtype)
    else:
        out = check_out(who, what, out, src, padded, dtype)
    scatter(src, out, [runs(a) for a in axes], fill)
    return out


def unpad(who: str, what: str, t: object, axes: tuple[Axis, ...], dtype: torch.dtype) -> torch.Tensor:
    """Padded -> logical, as a new tensor."""
    logical, padded = logical_shape(axes), padded_shape(axes)
    src = check_tensor(who, what, t, padded, dtype, contiguous=False)
    out = torch.empty(logical, dtype=dtype)
    for combo in itertools.product(*[copies(a) for a in axes]):
        out[tuple(slice(s, s + n) for s, _, n in combo)].copy_(src[tuple(slice(d, d + n) for _, d, n in combo)])
    return out


def shard(who: str, what: str, full: object, rank: object, tp_size: int, axes: tuple[Axis, ...],
          dtype: torch.dtype, fill: float | None, out: torch.Tensor | None, *, once: bool = False) -> torch.Tensor:
    """Rank `rank`'s padded shard of the full checkpoint tensor (shape `full_shape`), read with
    the logical stride; past a short rank's slice, its logical run holds `fill`.

    `once`: the tensor is added to the layer output after the all-reduce would sum
    the ranks (a row-parallel output bias), so rank 0 gets it and every other rank
    gets zeros: over all ranks it is counted exactly once.
    """
    r = check_rank(who, what, rank, tp_size)
    padded = padded_shape(axes)
    src = check_tensor(who, f"full {what}", full, full_shape(axes, tp_size), dtype, contiguous=False)
    out = torch.empty(padded, dtype=dtype) if out is None else check_out(who, what, out, src, padded, dtype)
    if once and r != 0:
        out.zero_()
        return out
    scatter(src, out, [rank_runs(a, r, tp_size) for a in axes], fill)
    return out
