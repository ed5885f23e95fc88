"""A safetensors checkpoint folder: one file or shards with model.safetensors.index.json.

`Checkpoint(folder)` reads config.json and the tensor index; `slice(name)` returns a
memory-mapped slice object of one tensor (nothing is read until it is indexed);
`tensor(name)` materialises a small tensor (routers, norms). Needs `safetensors` and torch
(framework "pt").

A slice is a `MappedSlice` where it can be: the tensor at the offset the checked header gives,
read with `os.preadv` from a descriptor the checkpoint opened once. Indexing it reads only the
bytes of the region's own elements: a contiguous region in one `preadv`, any other region whose
innermost elements are contiguous (a block of rows of each expert, a column block of every
row: gemma-4's fused `down_proj` [E, H, I] at tp > 1) one `preadv` per contiguous run, straight
into place, never the gaps between runs (the field's bar: a rank never reads what it does not
own). `Checkpoint.bytes_read` counts every byte read. Nothing is memory-mapped: a file truncated, or replaced by a shorter one in place,
while it is read gives a short read, which is FormatError LR115 naming the file and tensor,
never SIGBUS (a memory map faults on a page past the file's new end: issue 40). A tensor
whose dtype torch cannot view (F4, F6), or on a big-endian host, falls back to safetensors'
own `get_slice` (so does a zero-size tensor naming a dim past int64): those reads go through
safetensors' own memory map.
"""

from __future__ import annotations

import ctypes
import difflib
import os
import sys
from contextlib import ExitStack
from typing import Any, Self

from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.header import TensorInfo, read_header, read_json_object

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


class Checkpoint:
    """A checkpoint folder opened for slicing. Use as a context manager (closes the files).

    Every file is read within bounds (layoutc.tools.checkpoints.header): config.json and the
    index as JSON objects, each safetensors file's header checked against the file.
    Raises FormatError: LR110 no folder / an unreadable config.json, LR111 no safetensors or
    a bad index, LR115 a truncated or corrupt safetensors file, LR112 a tensor the format
    names is absent (closest names listed).
    """

    def __init__(self, folder: str) -> None:
        self.folder = folder
        cfg_path = os.path.join(folder, "config.json")
        if not os.path.isdir(folder) or not os.path.lexists(cfg_path):
            raise FormatError("LR110", f"{folder}: not a checkpoint folder (no config.json)")
        self.config: dict[str, Any] = read_json_object(cfg_path, "LR110", "config.json")
        self._single: dict[str, TensorInfo] | None = None  # a single file's header, read by _weight_map
        self.weight_map = self._weight_map()
        self.tensors = self._headers()
        self._stack = ExitStack()
        self._open: dict[str, Any] = {}
        self._fds: dict[str, int] = {}  # file -> a read-only descriptor (preadv), opened once
        self._read_count = [0]  # bytes every MappedSlice of this checkpoint has read (bytes_read)

    def _weight_map(self) -> dict[str, str]:
        index = os.path.join(self.folder, INDEX)
        if os.path.lexists(index):
            data = read_json_object(index, "LR111", "the index")
            wm = data.get("weight_map")
            if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
                raise FormatError("LR111", f"{index}: bad index: weight_map is not an object of file names")
            for fname in set(wm.values()):
                what = _what_is(os.path.join(self.folder, fname)) if os.path.basename(fname) == fname else None
                if what is not None:
                    shown = _shown(fname)
                    raise FormatError("LR111", f"{index}: names shard {shown}, which is not in the folder"
                                      if what == "missing" else f"{index}: names shard {shown}, which is {what}, "
                                      "not a safetensors file")
                if os.path.basename(fname) != fname:
                    raise FormatError("LR111", f"{index}: names shard {_shown(fname)}, which is not in the folder")
            return {str(k): v for k, v in wm.items()}
        single = os.path.join(self.folder, SINGLE)
        what = _what_is(single)
        if what == "missing":
            raise FormatError("LR111", f"{self.folder}: no {SINGLE} and no {INDEX}")
        if what is not None:
            raise FormatError("LR111", f"{single}: is {what}, not a safetensors file")
        self._single = read_header(single, SINGLE)  # kept: _headers reads each file's header once
        return {k: SINGLE for k in self._single}

    def _headers(self) -> dict[str, TensorInfo]:
        """Every tensor's header entry (dtype, shape, file), read from each file's header once;
        FormatError LR115 for a corrupt file, LR111 for an index naming a tensor its shard lacks."""
        out: dict[str, TensorInfo] = {}
        for fname in sorted(set(self.weight_map.values())):
            found = self._single if self._single is not None else read_header(os.path.join(self.folder, fname), fname)
            for name, info in found.items():
                if name in out:  # safetensors' loaders take whichever shard comes last: refuse instead
                    raise FormatError("LR111", f"{self.folder}: tensor {_shown(name)} is in two shards, "
                                      f"{out[name].file} and {fname}; a checkpoint holds each tensor once")
                out[name] = info
        for name, fname in self.weight_map.items():
            if out.get(name) is None or out[name].file != fname:
                held = f" (it is in {out[name].file})" if out.get(name) is not None else ""
                raise FormatError("LR111", f"{os.path.join(self.folder, INDEX)}: names tensor {_shown(name)} in "
                                  f"{_shown(fname)}, whose header does not hold it{held}")
        return {k: v for k, v in out.items() if k in self.weight_map}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every safetensors file this checkpoint opened."""
        self._stack.close()
        self._open.clear()
        fds = list(self._fds.values())
        self._fds.clear()  # the same dict the slices hold: a slice read after close() is refused
        for fd in fds:
            os.close(fd)

    @property
    def bytes_read(self) -> int:
        """Bytes read from the files so far by this checkpoint's `MappedSlice` reads (`slice`,
        `tensor`, `experts_slice`); reads that fall back to safetensors' own `get_slice` (a dtype
        torch lacks) are not counted."""
        return self._read_count[0]

    def has(self, name: str) -> bool:
        """Whether the checkpoint's weight map names tensor `name`."""
        return name in self.weight_map

    def _check(self, name: str) -> None:
        """FormatError LR112 (closest names listed) when the checkpoint has no tensor `name`."""
        if name not in self.weight_map:
            close = difflib.get_close_matches(name, list(self.weight_map), n=3, cutoff=0.6) \
                if len(name) <= 1000 and len(self.weight_map) <= 100_000 else []
            hint = f"; closest: {', '.join(map(_shown, close))}" if close else ""
            if name + "_blocks" in self.weight_map:
                hint = (f"; it is stored quantized ({name}_blocks / _scales, e.g. MXFP4): dequantize the "
                        "checkpoint to bf16 first (quantized formats are not declared yet)")
            raise FormatError("LR112", f"{self.folder}: no tensor {_shown(name)} (the declared format names it){hint}")

    def _handle(self, name: str) -> Any:
        self._check(name)
        fname = self.weight_map[name]
        if fname not in self._open:
            from safetensors import safe_open
            try:
                self._open[fname] = self._stack.enter_context(
                    safe_open(os.path.join(self.folder, fname), framework="pt"))
            except Exception as exc:  # safetensors raises its own error types
                raise FormatError("LR111", f"{fname}: cannot open: {exc}") from None
        return self._open[fname]

    def slice(self, name: str) -> Any:
        """The slice object of `name` (index it to read a region): a `MappedSlice` (`preadv`
        reads of only that region) where torch has the dtype, else safetensors' `get_slice`.
        Raises FormatError LR112 (no such tensor), LR111 (the file cannot be opened), LR115 (the
        file is now shorter than its header says: checked against the file's size here, and
        every read that comes back short, a file truncated while it is read, raises it too)."""
        self._check(name)
        info = self.tensors[name]
        from layoutc.runtime.loading import SAFETENSORS_DTYPES  # torch: not at import (audit reads headers)

        dtype = SAFETENSORS_DTYPES.get(info.dtype)
        if dtype is None or sys.byteorder != "little" or any(n > _MAX_DIM for n in info.shape):
            # no torch dtype: a dtype torch lacks, a big-endian host, a zero-size tensor's dim past int64
            return self._handle(name).get_slice(name)
        fd = self._fd(info.file)
        path = os.path.join(self.folder, info.file)
        now = os.fstat(fd).st_size  # a file truncated since its header was read is named here
        if info.end > now:
            raise FormatError("LR115", f"{path}: truncated safetensors file: tensor {_shown(name)} ends at byte "
                              f"{info.end} of {now}")
        return MappedSlice(fd, path, name, info.start, info.shape, dtype, info.dtype, self._fds, self._read_count)

    def _fd(self, fname: str) -> int:
        """A read-only descriptor of file `fname` (opened once; a regular file: its header was read)."""
        if fname not in self._fds:
            path = os.path.join(self.folder, fname)
            try:
                self._fds[fname] = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
                                           | getattr(os, "O_NONBLOCK", 0))
            except OSError as exc:
                raise FormatError("LR111", f"{fname}: cannot open: {exc.strerror or exc}") from None
        return self._fds[fname]

    def experts_slice(self, name: str, experts: int, flattened: bool) -> Any:
        """A fused tensor's slice with a leading experts axis: as stored, or, for a tensor that
        stacks the experts along its rows (`[E * rows, cols]`, DBRX), a view `[E, rows, cols]`
        that reads only the rows asked for. FormatError LR116 when the rows do not split."""
        src = self.slice(name)
        if not flattened:
            return src
        shape = list(src.get_shape())
        if len(shape) != 2 or shape[0] % experts:
            raise FormatError("LR116", f"{self.folder}: tensor {name!r} has shape {shape}, which does not stack "
                              f"{experts} experts along its rows (experts_flattened)")
        return _Unflattened(src, experts, shape[0] // experts, shape[1])

    def tensor(self, name: str) -> Any:
        """`name` as a torch tensor (for small tensors: routers, biases): read with `preadv`
        (FormatError LR115 when the file is shorter than its header says), or safetensors'
        `get_tensor` for a dtype torch lacks."""
        src = self.slice(name)
        return src[...] if isinstance(src, MappedSlice) else self._handle(name).get_tensor(name)

    def shape(self, name: str) -> tuple[int, ...]:
        """`name`'s stored shape (read from the header; nothing is loaded)."""
        self._check(name)
        return self.tensors[name].shape

    def dtype(self, name: str) -> str:
        """`name`'s stored safetensors dtype ("BF16", "F32", ...), from the header."""
        self._check(name)
        return self.tensors[name].dtype


def _what_is(path: str) -> str | None:
    """None for a regular file (a symlink to one too); else what `path` is, in words ("missing",
    "a FIFO", "a directory", "a symlink loop", ...). Nothing is opened."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a dangling symlink" if os.path.islink(path) else "missing"
    except OSError as exc:
        import errno

        return "a symlink loop" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror or exc})"
    except ValueError:  # a NUL byte or a lone surrogate (an index's JSON can hold both): LR199 before
        return "no file name (it holds a NUL byte or a lone surrogate)"
    for test, kind in ((stat.S_ISREG, None), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


#: the largest dim a torch tensor has (int64 sizes); only a zero-size tensor can name a larger one
_MAX_DIM = (1 << 63) - 1
#: a read whose span (first to last element) exceeds both this many bytes and SPAN_FACTOR times
#: its own bytes is split into slabs along its first axis (a narrow column block of wide rows)
SPAN_BYTES = 64 << 20
SPAN_FACTOR = 4
_IOV_BYTES = 1 << 30  # one preadv reads at most this much (Linux returns at most 2 GiB - 4 KiB)


def _is_contiguous(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a region of `sizes` / `strides` is one run of row-major elements (dims of one
    element may have any stride)."""
    step = 1
    for n, s in zip(reversed(sizes), reversed(strides), strict=True):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def _runs(sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int] | None:
    """(outer, run) for a region whose trailing dims `sizes[outer:]` are one row-major run of `run`
    elements, the dims before it enumerating the runs; None when its innermost dim is strided (a
    step slice: runs of one element, read as its span instead)."""
    if not sizes or strides[-1] != 1:
        return None
    step, outer = 1, len(sizes)
    for i in range(len(sizes) - 1, -1, -1):
        if sizes[i] == 1:
            outer = i
            continue
        if strides[i] != step:
            break
        step *= sizes[i]
        outer = i
    return outer, step


def _shown(name: str) -> str:
    """A tensor name for a message: its repr, cut to 120 characters (a key of 10,000 segments
    is not echoed whole)."""
    text = repr(name)
    return text if len(text) <= 120 else f"{text[:100]}... ({len(name)} characters)"


class MappedSlice:
    """One checkpoint tensor of a safetensors file, with safetensors' slice interface:
    `get_shape()` (list of ints), `get_dtype()` (the safetensors name, "BF16", "I32", ...) and
    `[index]` (ints, slices with a positive step, `...`), which reads that region with `os.preadv`
    into a fresh buffer and returns a torch tensor of the region (a strided view of its own
    buffer: writing to it changes nothing on disk). A read that comes back short (the file was
    truncated while it is read) raises FormatError LR115 naming the file and tensor: no read
    can fault (there is no memory map)."""

    def __init__(self, fd: int, path: str, name: str, start: int, shape: tuple[int, ...], dtype: Any,
                 st_dtype: str, open_fds: dict[str, int] | None = None, counter: list[int] | None = None) -> None:
        self.fd, self.path, self.name, self.start = fd, path, name, start
        self.shape, self.torch_dtype, self.dtype = tuple(shape), dtype, st_dtype
        self._open_fds = open_fds  # the checkpoint's descriptors: emptied by close()
        self._counter = counter if counter is not None else [0]  # bytes read (the checkpoint's count)

    def get_shape(self) -> list[int]:
        return list(self.shape)

    def get_dtype(self) -> str:
        return self.dtype

    def __getitem__(self, index: Any) -> Any:
        import torch

        parts = index if isinstance(index, tuple) else (index,)
        if not all(p is Ellipsis or isinstance(p, slice) or (isinstance(p, int) and not isinstance(p, bool))
                   for p in parts):
            raise TypeError(f"a checkpoint slice is indexed with ints, slices and ..., not {index!r}")
        if any(n == 0 for n in self.shape):  # no bytes; its dims may pass int64 strides ([0, 2**40, 2**40])
            template = torch.empty(0, dtype=self.torch_dtype).as_strided(self.shape, [1] * len(self.shape))
            return template[index]
        region = torch.empty(self.shape, dtype=self.torch_dtype, device="meta")[index]  # shape and strides only
        sizes, strides, offset = tuple(region.shape), region.stride(), int(region.storage_offset())
        return self._read(torch, sizes, strides, offset)

    def _read(self, torch: Any, sizes: tuple[int, ...], strides: tuple[int, ...], offset: int,
              out: Any = None) -> Any:
        """The region `sizes` / `strides` at element `offset` of the tensor, read from the file:
        into `out` (a contiguous tensor of `sizes`) when given, else into a buffer of its own. A
        contiguous region is read straight into its destination in one `preadv`; one whose
        innermost elements are contiguous (`_runs`: a block of rows of each expert, a column block
        of every row) one `preadv` per contiguous run, straight into place, so exactly its own
        elements' bytes are read; only a region strided in its innermost dim (a step slice, which
        no loader makes) is read as its span, slab by slab along its first axis where the span is
        over SPAN_BYTES and SPAN_FACTOR times its elements, else in one read into a staging buffer."""
        count = 1
        for n in sizes:
            count *= n
        if not count:
            return torch.empty(0, dtype=self.torch_dtype).as_strided(sizes, [1] * len(sizes))
        span = 1 + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True))
        item = self.torch_dtype.itemsize
        if _is_contiguous(sizes, strides):  # one run of the file, in order: read straight into the destination
            dst = torch.empty(sizes, dtype=self.torch_dtype) if out is None else out
            self._pread(dst, self.start + offset * item, span * item)
            return dst
        split = _runs(sizes, strides)
        if split is not None:  # one preadv per contiguous run: none of the gaps between runs is read
            dst = torch.empty(sizes, dtype=self.torch_dtype) if out is None else out
            outer, run = split
            firsts = torch.full((), offset, dtype=torch.int64)
            for n, s in zip(sizes[:outer], strides[:outer], strict=True):
                firsts = (firsts.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * s)
            self._pread_runs(dst, [self.start + f * item for f in firsts.reshape(-1).tolist()], run * item)
            return dst
        axis = next(i for i, n in enumerate(sizes) if n > 1)  # span > count: some axis has n > 1
        rest, rest_strides = sizes[:axis] + sizes[axis + 1:], strides[:axis] + strides[axis + 1:]
        if span > SPAN_FACTOR * count and span * item > SPAN_BYTES:  # too wide for one staging buffer
            dst = torch.empty(sizes, dtype=self.torch_dtype) if out is None else out
            for k in range(sizes[axis]):  # each slab's span is at most the whole span / sizes[axis]
                self._read(torch, rest, rest_strides, offset + k * strides[axis], dst.select(axis, k))
            return dst
        buf = torch.empty(span, dtype=self.torch_dtype)
        self._pread(buf, self.start + offset * item, span * item)
        view = buf.as_strided(sizes, strides, 0)
        if out is None:
            return view
        out.copy_(view)
        return out

    def _pread_runs(self, dst: Any, positions: list[int], nbytes: int) -> None:
        """Fill `dst` (contiguous, len(positions) * `nbytes` long) run by run: run k from file byte
        positions[k]; FormatError LR115 on a short read, ValueError once the checkpoint is closed."""
        self._check_open()
        total = len(positions) * nbytes
        whole = memoryview((ctypes.c_char * total).from_address(dst.data_ptr())).cast("B")
        fd, preadv = self.fd, os.preadv
        at = 0
        try:
            for pos in positions:
                if preadv(fd, [whole[at:at + nbytes]], pos) != nbytes:  # short: the careful loop says why
                    self._pread_at(dst.data_ptr() + at, pos, nbytes)
                at += nbytes
        except OSError as exc:
            raise FormatError("LR115", f"{self.path}: cannot read tensor {_shown(self.name)}: "
                              f"{exc.strerror or exc}") from None
        finally:
            self._counter[0] += at
            whole.release()

    def _check_open(self) -> None:
        """ValueError once the checkpoint is closed (its descriptor number may name another file by then)."""
        if self._open_fds is not None and self.fd not in self._open_fds.values():
            raise ValueError(f"{self.path}: the checkpoint was closed; read tensor {_shown(self.name)} before "
                             "closing it")

    def _pread(self, buf: Any, pos: int, nbytes: int) -> None:
        """Fill `buf` (contiguous, `nbytes` long) from file byte `pos`; FormatError LR115 on a short read,
        ValueError once the checkpoint is closed (its descriptor number may name another file by then)."""
        self._check_open()
        self._pread_at(buf.data_ptr(), pos, nbytes)
        self._counter[0] += nbytes

    def _pread_at(self, address: int, pos: int, nbytes: int) -> None:
        """Fill the `nbytes` at `address` from file byte `pos` (FormatError LR115 on a short read)."""
        done = 0
        while done < nbytes:
            want = min(nbytes - done, _IOV_BYTES)
            view = memoryview((ctypes.c_char * want).from_address(address + done)).cast("B")
            try:
                got = os.preadv(self.fd, [view], pos + done)
            except OSError as exc:
                raise FormatError("LR115", f"{self.path}: cannot read tensor {_shown(self.name)}: "
                                  f"{exc.strerror or exc}") from None
            if got <= 0:
                raise FormatError("LR115", f"{self.path}: truncated safetensors file: tensor {_shown(self.name)} "
                                  f"ends at byte {pos + nbytes}, but the file ended at byte {pos + done} while "
                                  "it was read")
            done += got


class _Unflattened:
    """`[E * rows, cols]` seen as `[E, rows, cols]`: indexed with three slices (or one int
    expert), it reads the experts' row blocks only (get_slice semantics: nothing else); a
    contiguous row range (a TP rank's rows) reads only those rows of each expert."""

    def __init__(self, src: Any, experts: int, rows: int, cols: int) -> None:
        self.src, self.experts, self.rows, self.cols = src, experts, rows, cols

    def get_shape(self) -> list[int]:
        return [self.experts, self.rows, self.cols]

    def get_dtype(self) -> Any:
        return self.src.get_dtype()

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, tuple):
            index = (index,)
        index = (*index, *([slice(None)] * (3 - len(index))))
        first, rows, cols = index
        if isinstance(first, int):
            own = range(*rows.indices(self.rows)) if isinstance(rows, slice) else None
            if own is not None and own.step == 1:  # a row range: only those rows are read
                start = first * self.rows + own.start
                return self.src[start:start + len(own), cols]
            block = self.src[first * self.rows:(first + 1) * self.rows, cols]
            return block[rows]
        picked = range(*first.indices(self.experts))
        own = range(*rows.indices(self.rows)) if isinstance(rows, slice) else None
        partial = own is not None and own.step == 1 and len(own) < self.rows
        if (picked.step != 1 and len(picked) > 1) or (partial and len(picked) > 0):
            # every step-th expert, or a TP rank's rows of each (issue 45 F6: the rank read every
            # expert's whole row block, tp times its bytes): each one's own rows, stacked
            import torch

            return torch.stack([self[e, rows, cols] for e in picked])
        lo, n = (picked.start, len(picked)) if picked else (0, 0)
        block = self.src[lo * self.rows:(lo + n) * self.rows, cols]
        return block.reshape(n, self.rows, block.shape[-1])[:, rows]
