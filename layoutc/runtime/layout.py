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
of their logical run (the tail) holds the tensor's tail fill (a contract's `tail fill`,
by default its fill). A position in the pad on any axis holds the fill, as engines pad
after loading.

Every function checks its inputs and raises `LayoutContractError` naming the
tensor and the expected shape; nothing writes outside the tensor it returns.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
import sys
from dataclasses import dataclass

import torch

from . import algebra
from .errors import LayoutContractError


@dataclass(frozen=True)
class Axis:
    """One axis of a contract tensor (see the module docstring for the layouts)."""

    name: str
    layout: str  # a word of algebra.Word: none | pad | halves | concat | interleave
    segments: int
    logical: int
    padded: int
    sharded: bool  # split across tensor-parallel ranks
    # sharded axes: one segment's length in the full checkpoint (storage units); None:
    # an even split, tp_size * logical
    full: int | None = None

    def __post_init__(self) -> None:
        if self.layout not in _WORDS:
            raise LayoutContractError(f"axis {self.name}: unknown layout word {self.layout!r}; known: "
                                      f"{', '.join(_WORDS)}")

    @property
    def word(self) -> algebra.Word:
        """The layout word (algebra.Word) this axis is placed by."""
        return algebra.Word(self.layout)


_WORDS = tuple(w.value for w in algebra.Word)

def segment_length(axis: Axis, tp_size: int) -> int:
    """One segment's length in the full checkpoint tensor (the rank's own for unsharded axes)."""
    if not axis.sharded:
        return axis.logical
    return axis.logical * tp_size if axis.full is None else axis.full


def extent(axis: Axis, rank: int, tp_size: int) -> tuple[int, int]:
    """(start, length) of rank `rank`'s slice of one segment of the full checkpoint axis."""
    if not axis.sharded:
        return 0, axis.logical
    return algebra.extent(rank, axis.logical, segment_length(axis, tp_size), algebra.INTS)


def logical_shape(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """The tensor's logical shape (what the checkpoint holds for one rank)."""
    return tuple(a.segments * a.logical for a in axes)


def padded_shape(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    """The tensor's padded shape (what the kernel reads)."""
    return tuple(a.segments * a.padded for a in axes)


def full_shape(axes: tuple[Axis, ...], tp_size: int) -> tuple[int, ...]:
    """The full checkpoint shape that `shard` reads (sharded axes at their full length)."""
    return tuple(a.segments * segment_length(a, tp_size) for a in axes)


#: One axis's (copies, pads, tails) (algebra.Runs).
Runs = algebra.Runs


def runs(axis: Axis, start: int = 0, live: int | None = None, stride: int | None = None) -> Runs:
    """(copies, pads, tails) of one axis whose source segments hold entries [start, start + live)
    of `stride`-long segments (default: the whole logical run, segments `logical` apart).

    copies: (source start, destination start, length) of each live run; pads: [lo, hi) of
    each run past a segment's logical run (the kernel's pad); tails: [lo, hi) of each run
    inside a segment's logical run past the rank's slice (a short rank of a block shard).
    """
    return algebra.runs(axis.word, axis.segments, axis.logical, axis.padded, start, live, stride)


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
    (not a tensor, nested, sparse or other layout, a fake tensor, shape, dtype, device, contiguity).
    """
    if (type(t) is torch.Tensor or type(t) is torch.nn.Parameter) and t.layout == torch.strided \
            and not t.is_nested and t.shape == shape and t.dtype == dtype and t.is_cpu \
            and (not contiguous or t.is_contiguous()):
        return t  # the common case, in one test (this runs on every forward)
    if not isinstance(t, torch.Tensor):
        raise LayoutContractError(f"{who}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested or t.layout != torch.strided:
        kind = "is a nested tensor" if t.is_nested else f"has layout {t.layout}"
        raise LayoutContractError(f"{who}: {what} {kind}; pass a dense (strided) tensor "
                                  f"of shape {shape} (e.g. .to_dense())")
    if _is_fake(t):
        raise LayoutContractError(f"{who}: {what} is a fake tensor (torch's FakeTensor: a shape with no data); "
                                  f"pass a real tensor of shape {shape}")
    if tuple(t.shape) != shape:
        raise LayoutContractError(f"{who}: {what} has shape {tuple(t.shape)}, expected {shape}")
    if t.dtype != dtype:
        raise LayoutContractError(f"{who}: {what} has dtype {t.dtype}, expected {dtype} (shape {shape})")
    if t.device.type != "cpu":
        raise LayoutContractError(f"{who}: {what} is on {t.device}, expected a CPU tensor (shape {shape})")
    if contiguous and not t.is_contiguous():
        raise LayoutContractError(f"{who}: {what} must be contiguous (shape {shape})")
    return t  # a tensor subclass that is otherwise right


def _is_fake(t: torch.Tensor) -> bool:
    """Whether `t` is torch's FakeTensor (its module is loaded once one exists)."""
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    return fake is not None and isinstance(t, fake.FakeTensor)


def last_element(t: torch.Tensor) -> int:
    """Storage index of the last element a non-empty `t` can touch (its offset plus its extent)."""
    return int(t.storage_offset()) + sum((int(size) - 1) * abs(int(stride))
                                         for size, stride in zip(t.shape, t.stride(), strict=True))


def check_data(who: str, what: str, t: torch.Tensor) -> torch.Tensor:
    """`t` (already checked by `check_tensor`) lies within its storage: a storage resized
    smaller after the tensor was made (as FSDP frees a parameter: `untyped_storage().resize_(0)`)
    leaves a tensor that every read or write would take past its memory.
    A tensor batched by torch.func.vmap is refused too: the padded result is a new tensor written
    in place, which vmap cannot batch (call the function per item).
    Raises LayoutContractError naming `what`."""
    if torch._C._functorch.is_batchedtensor(t):
        raise LayoutContractError(f"{who}: {what} is batched by torch.func.vmap; the result is a new tensor "
                                  "written in place, which vmap cannot batch: call the function per item")
    if t.numel() == 0:
        return t
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):  # no storage to measure (a wrapper subclass, a zero tensor)
        return t
    end = (last_element(t) + 1) * t.element_size()
    if end > nbytes:
        raise LayoutContractError(f"{who}: {what} reaches byte {end} of a storage of "
                                  f"{nbytes} bytes (the storage was resized after the tensor was made, e.g. "
                                  "freed by FSDP); pass a tensor whose memory is allocated")
    return t


def empty(who: str, what: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """torch.empty(shape, dtype), or MemoryError naming `what` and the bytes asked for when the
    allocator refuses (torch raises a RuntimeError for that on the CPU)."""
    try:
        return torch.empty(shape, dtype=dtype)
    except RuntimeError as err:
        if "can't allocate memory" not in str(err) and not isinstance(err, torch.OutOfMemoryError):
            raise
        raise MemoryError(f"{who}: {what} of shape {shape} ({dtype}) needs {math.prod(shape) * dtype.itemsize} "
                          "bytes, more than can be "
                          "allocated here") from None


def byte_range(t: torch.Tensor) -> tuple[int, int] | None:
    """[first, last + 1) byte address that `t` can touch (empty tensors: (0, 0)); None when `t` has
    no storage whose address can be read (a wrapper tensor subclass, torch's zero tensor, a tensor
    inside torch.func.vmap / functionalize, a fake tensor's storage at address 0)."""
    if t.numel() == 0:
        return (0, 0)
    try:
        base = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # torch raises these for storage it does not expose
        return None
    if base == 0:
        return None  # storage with no memory behind it (a fake tensor's)
    return (base + int(t.storage_offset()) * t.element_size(), base + (last_element(t) + 1) * t.element_size())


def overlaps(who: str, what: str, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte ranges that `a` and `b` can touch intersect (`byte_range`).

    Two mappings of one file (two `torch.from_file(..., shared=True)` of the same path) are two
    address ranges; their sharing cannot be seen here, and is the caller's to avoid.
    Raises LayoutContractError, naming `what`, when either tensor is not dense (strided) or has no
    storage whose address can be read: whether it aliases the other cannot be known."""
    x, y = _addressable(who, what, a), _addressable(who, what, b)
    return x[0] < y[1] and y[0] < x[1]


def _addressable(who: str, what: str, t: torch.Tensor) -> tuple[int, int]:
    if t.layout != torch.strided:
        raise LayoutContractError(f"{who}: {what}: a tensor has layout {t.layout}; pass a dense (strided) "
                                  "tensor (e.g. .to_dense())")
    found = byte_range(t)
    if found is None:
        if t._is_zerotensor():
            kind = "torch's zero tensor"
        elif type(t) not in (torch.Tensor, torch.nn.Parameter):
            kind = f"a {type(t).__name__} (tensor subclass)"
        else:
            kind = "a tensor inside torch.func (vmap, functionalize) or without memory"
        raise LayoutContractError(f"{who}: {what}: {kind} of shape {tuple(t.shape)} has no storage whose "
                                  "address can be read, so sharing memory with the other cannot be ruled "
                                  "out; pass a plain tensor (e.g. .clone())")
    return found


def check_writable(who: str, what: str, t: torch.Tensor) -> torch.Tensor:
    """`t` (already shape-checked) can be written in place here: an inference tensor only inside
    torch.inference_mode() (torch refuses in-place updates to it outside, after a partial write).
    torch's zero tensor (`torch._efficientzerotensor`) is never writable.
    Raises LayoutContractError naming `what`."""
    if t._is_zerotensor():
        raise LayoutContractError(f"{who}: {what} is torch's zero tensor, which cannot be written; pass a "
                                  "plain tensor (e.g. torch.empty)")
    if t.is_inference() and not torch.is_inference_mode_enabled():
        raise LayoutContractError(f"{who}: {what} was made under torch.inference_mode() and can be "
                                  "written only inside it; call there, or pass a tensor made outside it")
    return t


def check_dest(who: str, what: str, t: object, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor to be written in place (an `out=`, a load's destination): `check_tensor`, then
    `check_writable` and `check_data`. Raises LayoutContractError naming `what`."""
    return check_data(who, what, check_writable(who, what, check_tensor(who, what, t, shape, dtype)))


def check_out(who: str, what: str, out: object, source: torch.Tensor | tuple[torch.Tensor, ...],
              shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """`out=`: a contiguous CPU tensor of the padded shape, not requiring grad, sharing no memory with
    `source` (one tensor, or every tensor the call reads or writes besides `out`: prepack_padded's
    w13 out= is written before its w2 input is read, and the two outs must not overlap), and
    writable here (an inference tensor only inside torch.inference_mode()).
    `out` must not be another mapping of a file that a source maps: that cannot be seen (`overlaps`).
    Raises LayoutContractError naming what was wrong (also for a tensor whose address cannot be read)."""
    checked = check_dest(who, f"out= for {what}", out, shape, dtype)
    if checked.requires_grad:
        raise LayoutContractError(f"{who}: out= for {what} requires grad; pass a plain tensor")
    for other in source if isinstance(source, tuple) else (source,):
        check_data(who, f"an input beside out= for {what}", other)
        if overlaps(who, f"out= for {what} and its input", checked, other):
            raise LayoutContractError(f"{who}: out= for {what} overlaps the input's memory (an input of the "
                                      "call or the other out=); pass a separate buffer")
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


@dataclass(frozen=True)
class FormatCode:
    """A fill code of a tensor whose decode reads its code through a number format
    (`decode = e4m3fn(code) * scale`): on a 1-byte float storage it is the stored byte, on any
    other storage the value (vocab.holds_byte, the one rule; `write_code` writes it). The
    generated modules pass one for a nonzero code of such a tensor that may be stored as a
    1-byte float; every other fill is a plain number (a value), and 0 is all-zero bits in
    every storage either way."""

    code: int

    def __post_init__(self) -> None:
        if isinstance(self.code, bool) or not isinstance(self.code, int):
            raise LayoutContractError(f"FormatCode: code={self.code!r} must be an int")


#: A fill: a value (float or int, written by value), or a FormatCode.
Fill = float | FormatCode

#: Same-width integer dtype per element size: a float storage's bits (`write_code`, `_masked_rows`).
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def write_code(piece: torch.Tensor, fill: Fill) -> None:
    """Write the stored code `fill` into every element of `piece`: the one write of a pad or tail.

    A `FormatCode` on a 1-byte float storage (float8_e4m3fn, float8_e5m2) is written as the byte
    through the storage's uint8 view, so the kernel reads exactly the byte the checker resolved
    and the verifier decoded (`fill decoded 0` on `code 1..255` of `e4m3fn(code)` is byte 0x80,
    -0.0; `fill_(128.0)` would store 0x70, 128.0). Anything else is written by value (`fill_`),
    which is the code itself on an integer storage and the float the code names on a float
    storage read bare (vocab.holds_byte). 0 is all-zero bits in every storage: a memset per run.
    Raises LayoutContractError for a FormatCode outside 0..255 on a 1-byte float storage."""
    if isinstance(fill, FormatCode):
        if piece.dtype.is_floating_point and piece.element_size() == 1:
            if not 0 <= fill.code <= 0xFF:
                raise LayoutContractError(f"fill code {fill.code} is not a byte (0..255) of {piece.dtype}")
            if fill.code == 0:
                piece.zero_()
            else:
                piece.view(torch.uint8).fill_(fill.code)
            return
        fill = fill.code
    if fill == 0:
        piece.zero_()  # a memset per run
    else:
        piece.fill_(fill)


#: Output bytes per block when a fill runs along the innermost axis (`scatter`): small enough that
#: a block's rows are still in the last-level cache when its pad columns are written.
BLOCK_BYTES = 8 << 20


def scatter(src: torch.Tensor, dst: torch.Tensor, plan: list[Runs], fill: Fill | None,
            tail_fill: Fill | None = None) -> None:
    """Copy each live run of `src` into `dst` once, then fill the rest once (`fill_runs`).

    plan: per axis, (copies, pads, tails) from `runs` / `rank_runs`. `fill` None (a contract's
    `fill uninit`) leaves the pad as allocated; `tail_fill` None: the tail holds `fill`.
    A zero pad at the end of the innermost axis, all else copied whole (w2's padded
    intermediate columns: a few bytes of every row), is written with each row in one pass
    (`_masked_rows`). Otherwise, when the innermost axis has pad or tail runs and the first
    axis is copied whole (the experts), the work runs in
    blocks of first-axis entries of about `BLOCK_BYTES` of output, copy then fill per block:
    otherwise the fill walks every row of the whole tensor a second time, from memory
    (bench/load_bench.py `--child pads`: w2 at tp 4 0.82-0.88x of a plain copy in one pass,
    0.90-0.98x in 8 MiB blocks). Each position is still written once.
    """
    if _masked_rows(src, dst, plan, fill, tail_fill):
        return
    n0 = dst.shape[0] if dst.dim() > 1 else 0
    if n0 > 1 and (plan[-1][1] or plan[-1][2]) and plan[0] == ([(0, 0, n0)], [], []) and src.shape[0] == n0:
        step = max(1, BLOCK_BYTES // max(1, dst[0].numel() * dst.element_size()))
        if step < n0:
            for lo in range(0, n0, step):
                hi = min(n0, lo + step)
                _scatter(src[lo:hi], dst[lo:hi], [([(0, 0, hi - lo)], [], []), *plan[1:]], fill, tail_fill)
            return
    _scatter(src, dst, plan, fill, tail_fill)


def _masked_rows(src: torch.Tensor, dst: torch.Tensor, plan: list[Runs], fill: Fill | None,
                 tail_fill: Fill | None) -> bool:
    """The zero pad of the innermost axis in the same pass as the copy; False where it does not apply.

    Applies when every outer axis is copied whole, the innermost axis is one live run
    [s, s + n) placed at 0 followed by one zero pad [n, P) (w2's padded intermediate columns),
    `dst` is contiguous and `src`'s rows are evenly strided. Destination row r is then
    `src_flat[s + r * row_stride : ... + P] & mask`, mask all-ones on the first n entries
    and zero on the pad: one vectorised integer AND per row, so the pad is written with the
    row instead of by a second pass over every row (bench/pad_profile.py: 0.77-0.88x of a
    plain copy as copy + fill, 0.94-1.03x this way). The P - n entries read past a row
    belong to the next row of `src` and are masked to zero bits; the last row, whose read
    would run past `src`, is copied and zeroed on its own. Bit patterns are kept exactly
    (an AND, not a multiply: no NaN or -0.0 from the pad), and the pad is all-zero bits: what
    `write_code` writes for a fill of 0 in every storage (only a plain 0 fill takes this path).
    """
    if fill != 0 or tail_fill not in (None, 0) or src.dim() != dst.dim() or src.dim() < 2 or src.requires_grad:
        return False
    if dst.dtype == torch.bool or src.is_neg() or src.is_conj() or dst.is_neg() or dst.is_conj() \
            or (dst.is_inference() and not torch.is_inference_mode_enabled()):
        return False  # a bool copy normalises bytes to 0/1; a lazy neg/conj view has no bit view;
        # an inference tensor outside inference mode is refused by copy_, and must be here too
    if any(c != [(0, 0, n)] or p or t or src.shape[d] != n
           for d, ((c, p, t), n) in enumerate(zip(plan[:-1], dst.shape[:-1], strict=True))):
        return False
    c, p, t = plan[-1]
    width = dst.shape[-1]
    if len(c) != 1 or c[0][1] != 0 or t or p != [(c[0][2], width)] or not dst.is_contiguous() \
            or src.stride(-1) != 1 or dst.element_size() not in _BITS or dst.dtype != src.dtype:
        return False
    start, n = c[0][0], c[0][2]
    if start + n > src.shape[-1]:
        return False  # a plan that reads past the source's row is not this function's to judge
    rows = dst.numel() // width
    row_stride = src.stride(-2)
    if any(src.stride(d) != src.stride(d + 1) * src.shape[d + 1] for d in range(src.dim() - 2)) \
            or rows < 2 or row_stride < n:
        return False
    if src.storage_offset() + start + (rows - 2) * row_stride + width - 1 > last_element(src):
        return False  # the pad is wider than a row: the reads would leave `src`
    bits = _BITS[dst.element_size()]
    base = src.view(bits)
    flat = base.as_strided((rows - 1, width), (row_stride, 1), src.storage_offset() + start)
    mask = torch.zeros(width, dtype=bits)
    mask[:n] = -1
    out = dst.view(bits).view(rows, width)
    torch.bitwise_and(flat, mask, out=out[:-1])
    out[-1, :n].copy_(base.as_strided((n,), (1,), src.storage_offset() + start + (rows - 1) * row_stride))
    out[-1, n:].zero_()
    return True


def _scatter(src: torch.Tensor, dst: torch.Tensor, plan: list[Runs], fill: Fill | None,
             tail_fill: Fill | None) -> None:
    for combo in itertools.product(*[c for c, _, _ in plan]):
        src_index = tuple(slice(s, s + n) for s, _, n in combo)
        dst_index = tuple(slice(d, d + n) for _, d, n in combo)
        dst[dst_index].copy_(src[src_index])
    fill_runs(dst, plan, fill, tail_fill)


def fill_runs(dst: torch.Tensor, plan: list[Runs], fill: Fill | None, tail_fill: Fill | None = None) -> None:
    """Write every non-live position of `dst` exactly once, touching no live one.

    plan: per axis, (copies, pads, tails) from `runs` / `rank_runs`. A position in a pad run
    on any axis holds `fill` (the kernel's pad, added after loading: it wins over a tail);
    a position in a tail run on some axis and in no pad run holds `tail_fill` (past a short
    rank's slice of a block shard, e.g. vLLM's unit scales there). `fill` None (`fill
    uninit`) leaves the pad as allocated; `tail_fill` None: the tail holds `fill` too.
    Each position is written by the first axis that puts it there (earlier axes restricted
    to the runs that do not: live for a tail, live or tail for a pad).
    """
    live = [[(d, d + n) for _, d, n in c] for c, _, _ in plan]
    if tail_fill is None or tail_fill == fill:
        if fill is None:
            return
        # one value everywhere: pad and tail runs are written alike (earlier axes live)
        for d, (_, pads, tails) in enumerate(plan):
            for lo, hi in tails + pads:
                for covered in itertools.product(*live[:d]):
                    write_code(dst[(*(slice(a, b) for a, b in covered), slice(lo, hi))], fill)
        return
    kept = [lv + tails for lv, (_, _, tails) in zip(live, plan, strict=True)]  # not in a pad run
    if fill is not None:
        for d, (_, pads, _) in enumerate(plan):
            for lo, hi in pads:
                for covered in itertools.product(*kept[:d]):
                    write_code(dst[(*(slice(a, b) for a, b in covered), slice(lo, hi))], fill)
    for d, (_, _, tails) in enumerate(plan):
        for lo, hi in tails:
            for before in itertools.product(*live[:d]):
                for after in itertools.product(*kept[d + 1:]):
                    index = (*(slice(a, b) for a, b in before), slice(lo, hi), *(slice(a, b) for a, b in after))
                    write_code(dst[index], tail_fill)


def pad(who: str, what: str, t: object, axes: tuple[Axis, ...], dtype: torch.dtype, fill: Fill | None,
        out: torch.Tensor | None) -> torch.Tensor:
    """Logical -> padded. Returns `t` itself when nothing is padded and `out` is None."""
    logical, padded = logical_shape(axes), padded_shape(axes)
    src = check_tensor(who, what, t, logical, dtype, contiguous=False)
    if out is None:
        check_data(who, what, src)
        if logical == padded:
            return src
    dst, recording = _destination(who, what, f"padded {what}", out, src, padded, dtype)
    with recording:
        scatter(src, dst, [runs(a) for a in axes], fill)
    return dst


def _destination(who: str, what: str, made: str, out: torch.Tensor | None, src: torch.Tensor, shape: tuple[int, ...],
                 dtype: torch.dtype) -> tuple[torch.Tensor, contextlib.AbstractContextManager[object]]:
    """pad/shard's result and how it is written: a new tensor (named `made` if it cannot be allocated),
    recorded by autograd as any op is; or `out=` (checked against `src`, whose storage check_out makes),
    a buffer written under no_grad, as load_* writes its destination."""
    if out is None:
        return empty(who, made, shape, dtype), contextlib.nullcontext()
    return check_out(who, what, out, src, shape, dtype), torch.no_grad()


def unpad(who: str, what: str, t: object, axes: tuple[Axis, ...], dtype: torch.dtype) -> torch.Tensor:
    """Padded -> logical, as a new tensor."""
    logical, padded = logical_shape(axes), padded_shape(axes)
    src = check_data(who, what, check_tensor(who, what, t, padded, dtype, contiguous=False))
    out = empty(who, f"unpadded {what}", logical, dtype)
    for combo in itertools.product(*[copies(a) for a in axes]):
        out[tuple(slice(s, s + n) for s, _, n in combo)].copy_(src[tuple(slice(d, d + n) for _, d, n in combo)])
    return out


def shard(who: str, what: str, full: object, rank: object, tp_size: int, axes: tuple[Axis, ...],
          dtype: torch.dtype, fill: Fill | None, out: torch.Tensor | None, *, once: bool = False,
          tail_fill: Fill | None = None) -> torch.Tensor:
    """Rank `rank`'s padded shard of the full checkpoint tensor (shape `full_shape`), read with
    the logical stride; past a short rank's slice, its logical run holds `tail_fill` (a
    contract's `tail fill`; None: `fill`), and the pad on any axis holds `fill`.

    `once`: the tensor is added to the layer output after the all-reduce would sum
    the ranks (a row-parallel output bias), so rank 0 gets it and every other rank
    gets zeros: over all ranks it is counted exactly once.
    """
    r = check_rank(who, what, rank, tp_size)
    padded = padded_shape(axes)
    src = check_tensor(who, f"full {what}", full, full_shape(axes, tp_size), dtype, contiguous=False)
    if out is None:
        check_data(who, f"full {what}", src)
    dst, recording = _destination(who, what, f"{what} shard", out, src, padded, dtype)
    with recording:
        if once and r != 0:
            return dst.zero_()
        scatter(src, dst, [rank_runs(a, r, tp_size) for a in axes], fill, tail_fill)
    return dst
