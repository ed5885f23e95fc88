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
stride (vllm#43865): rank r reads entries [r * logical, (r + 1) * logical) of each
segment of the full checkpoint (for `interleave`, a contiguous block of pairs).

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


def logical_shape(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """The tensor's logical shape (what the checkpoint holds for one rank)."""
    return tuple(a.segments * a.logical for a in axes)


def padded_shape(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """The tensor's padded shape (what the kernel reads)."""
    return tuple(a.segments * a.padded for a in axes)


def full_shape(axes: tuple[Axis, ...], tp_size: int) -> tuple[int, ...]:
    """The full checkpoint shape at tp_size = 1: sharded axes are tp_size times longer."""
    return tuple(a.segments * a.logical * (tp_size if a.sharded else 1) for a in axes)


def copies(axis: Axis) -> list[tuple[int, int, int]]:
    """(source start, destination start, length) of each logical run of `axis`."""
    if axis.logical == 0:
        return []
    if axis.layout == "interleave":
        return [(0, 0, axis.segments * axis.logical)]
    stride = axis.logical if axis.layout == "concat" else axis.padded
    return [(k * axis.logical, k * stride, axis.logical) for k in range(axis.segments)]


def fills(axis: Axis) -> list[tuple[int, int]]:
    """[start, stop) of each pad run of `axis`."""
    if axis.padded == axis.logical:
        return []
    if axis.layout in ("concat", "interleave"):
        return [(axis.segments * axis.logical, axis.segments * axis.padded)]
    return [(k * axis.padded + axis.logical, (k + 1) * axis.padded) for k in range(axis.segments)]


def sources(axis: Axis, rank: int, tp_size: int) -> list[int]:
    """Where each logical run of `axis` starts in the full (unsharded) checkpoint tensor."""
    runs = copies(axis)
    if not axis.sharded:
        return [src for src, _, _ in runs]
    if axis.layout == "interleave":
        return [rank * axis.segments * axis.logical for _ in runs]
    return [k * axis.logical * tp_size + rank * axis.logical for k in range(len(runs))]


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


def scatter(src: torch.Tensor, dst: torch.Tensor, axes: tuple[Axis, ...], starts: list[list[int]],
            fill: float | None) -> None:
    """Copy each logical run of `src` (starting at `starts`) into `dst` once, then fill each pad run once.

    `fill` None (a contract's `fill uninit`) leaves the pad as allocated; a zero fill
    uses `zero_` (a memset per run) rather than `fill_`.
    """
    _scatter(src, dst, axes, starts, fill)


def _scatter(src: torch.Tensor, dst: torch.Tensor, axes: tuple[Axis, ...], starts: list[list[int]],
             fill: float | None) -> None:
    runs = [copies(a) for a in axes]
    for combo in itertools.product(*[list(zip(s, r, strict=True)) for s, r in zip(starts, runs, strict=True)]):
        src_index = tuple(slice(s, s + n) for s, (_, _, n) in combo)
        dst_index = tuple(slice(d, d + n) for _, (_, d, n) in combo)
        dst[dst_index].copy_(src[src_index])
    if fill is None:
        return
    for d, axis in enumerate(axes):
        for lo, hi in fills(axis):
            for covered in itertools.product(*runs[:d]):
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
    scatter(src, out, axes, [[s for s, _, _ in copies(a)] for a in axes], fill)
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
    """Rank `rank`'s padded shard of the full checkpoint tensor, read with the logical stride.

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
    scatter(src, out, axes, [sources(a, r, tp_size) for a in axes], fill)
    return out
