"""A safetensors checkpoint folder: one file or shards with model.safetensors.index.json.

`Checkpoint(folder)` reads config.json and the tensor index; `slice(name)` returns a
memory-mapped slice object of one tensor (nothing is read until it is indexed);
`tensor(name)` materialises a small tensor (routers, norms). Needs `safetensors` and torch
(framework "pt").

A slice is a `MappedSlice` where it can be: a zero-copy, read-only torch view of the file's
bytes (`mmap.ACCESS_READ`, so a write through it faults instead of corrupting later reads),
at the offset the checked header gives. Indexing it returns a view, so a loader's `copy_`
moves each byte once, from the page cache into the padded parameter; safetensors'
`get_slice` materialises every read into a fresh tensor first (a second copy, and about
12 us per read: bench/quant_load_bench.py). A tensor whose dtype torch cannot view
(F4, F6), whose offset is not a multiple of its element size, or on a big-endian host falls
back to safetensors' own `get_slice` (so does a zero-size tensor naming a dim past int64).
"""

from __future__ import annotations

import difflib
import mmap
import os
import sys
import warnings
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
        self._mmaps: dict[str, mmap.mmap] = {}  # file -> its read-only map (whose size() is the file's size now)
        self._typed_maps: dict[tuple[str, Any], Any] = {}  # (file, dtype) -> the mapped bytes viewed as dtype

    def _weight_map(self) -> dict[str, str]:
        index = os.path.join(self.folder, INDEX)
        if os.path.lexists(index):
            data = read_json_object(index, "LR111", "the index")
            wm = data.get("weight_map")
            if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
                raise FormatError("LR111", f"{index}: bad index: weight_map is not an object of file names")
            for fname in set(wm.values()):
                if os.path.basename(fname) != fname or not os.path.isfile(os.path.join(self.folder, fname)):
                    raise FormatError("LR111", f"{index}: names shard {fname!r}, which is not in the folder")
            return {str(k): v for k, v in wm.items()}
        single = os.path.join(self.folder, SINGLE)
        if not os.path.isfile(single):
            raise FormatError("LR111", f"{self.folder}: no {SINGLE} and no {INDEX}")
        self._single = read_header(single, SINGLE)  # kept: _headers reads each file's header once
        return {k: SINGLE for k in self._single}

    def _headers(self) -> dict[str, TensorInfo]:
        """Every tensor's header entry (dtype, shape, file), read from each file's header once;
        FormatError LR115 for a corrupt file, LR111 for an index naming a tensor its shard lacks."""
        out: dict[str, TensorInfo] = {}
        for fname in sorted(set(self.weight_map.values())):
            out.update(self._single if self._single is not None
                       else read_header(os.path.join(self.folder, fname), fname))
        for name, fname in self.weight_map.items():
            if out.get(name) is None or out[name].file != fname:
                raise FormatError("LR111", f"{os.path.join(self.folder, INDEX)}: names tensor {name!r} in "
                                  f"{fname}, whose header does not hold it")
        return {k: v for k, v in out.items() if k in self.weight_map}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every safetensors file this checkpoint opened."""
        self._stack.close()
        self._open.clear()
        self._mmaps.clear()  # each map is unmapped when the last view of it is dropped
        self._typed_maps.clear()

    def has(self, name: str) -> bool:
        """Whether the checkpoint's weight map names tensor `name`."""
        return name in self.weight_map

    def _check(self, name: str) -> None:
        """FormatError LR112 (closest names listed) when the checkpoint has no tensor `name`."""
        if name not in self.weight_map:
            close = difflib.get_close_matches(name, list(self.weight_map), n=3, cutoff=0.6)
            hint = f"; closest: {', '.join(close)}" if close else ""
            if name + "_blocks" in self.weight_map:
                hint = (f"; it is stored quantized ({name}_blocks / _scales, e.g. MXFP4): dequantize the "
                        "checkpoint to bf16 first (quantized formats are not declared yet)")
            raise FormatError("LR112", f"{self.folder}: no tensor {name!r} (the declared format names it){hint}")

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
        """The memory-mapped slice object of `name` (index it to read a region): a `MappedSlice`
        (zero-copy views) where torch can view the bytes, else safetensors' `get_slice`.
        Raises FormatError LR112 (no such tensor), LR111 (the file cannot be opened), LR115 (the
        file is now shorter than its header says: checked against the file's size at each call,
        so a file truncated between calls is named; one truncated while a view is being read
        still faults, as safetensors' own map does)."""
        self._check(name)
        info = self.tensors[name]
        from layoutc.runtime.loading import SAFETENSORS_DTYPES  # torch: not at import (audit reads headers)

        dtype = SAFETENSORS_DTYPES.get(info.dtype)
        if dtype is None or sys.byteorder != "little" or any(n > _MAX_DIM for n in info.shape) \
                or info.start % dtype.itemsize:
            # no torch view: a dtype torch lacks, a big-endian host, a zero-size tensor's dim past
            # int64, or data not aligned to its element size
            return self._handle(name).get_slice(name)
        base = self._typed(info.file, dtype)
        size = dtype.itemsize
        count, strides = 1, []
        for n in reversed(info.shape):
            strides.append(count)
            count *= n
        if not count:  # any strides view an empty tensor; its contiguous ones can pass int64 ([0, 2**40, 2**40])
            strides = [1] * len(strides)
        # the file as it is now (one fstat of the map's own descriptor): a file truncated after it
        # was mapped would fault (SIGBUS) on the first read past its new end, not raise
        now = min(base.numel() * size, self._mmaps[info.file].size())
        if info.start + count * size > now:
            raise FormatError("LR115", f"{os.path.join(self.folder, info.file)}: truncated safetensors file: "
                              f"tensor {name!r} ends at byte {info.start + count * size} of {now}")
        return MappedSlice(base.as_strided(info.shape, strides[::-1], info.start // size), info.dtype)

    def _typed(self, fname: str, dtype: Any) -> Any:
        """File `fname`'s whole bytes viewed as `dtype` (its trailing partial element dropped), one
        view per (file, dtype): a tensor is then one `as_strided` of it."""
        key = (fname, dtype)
        if key not in self._typed_maps:
            import torch

            mapped = self._map(fname)
            with warnings.catch_warnings():  # torch warns that the buffer is not writable: by design
                warnings.simplefilter("ignore", UserWarning)
                self._typed_maps[key] = torch.frombuffer(mapped, dtype=dtype, count=len(mapped) // dtype.itemsize)
        return self._typed_maps[key]

    def _map(self, fname: str) -> mmap.mmap:
        """File `fname` mapped read-only (once)."""
        if fname not in self._mmaps:
            path = os.path.join(self.folder, fname)
            try:
                with open(path, "rb") as f:
                    self._mmaps[fname] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise FormatError("LR111", f"{fname}: cannot map: {exc}") from None
        return self._mmaps[fname]

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
        """`name` as a torch tensor (for small tensors: routers, biases)."""
        return self._handle(name).get_tensor(name)

    def shape(self, name: str) -> tuple[int, ...]:
        """`name`'s stored shape (read from the header; nothing is loaded)."""
        self._check(name)
        return self.tensors[name].shape

    def dtype(self, name: str) -> str:
        """`name`'s stored safetensors dtype ("BF16", "F32", ...), from the header."""
        self._check(name)
        return self.tensors[name].dtype


#: the largest dim a torch tensor has (int64 sizes); only a zero-size tensor can name a larger one
_MAX_DIM = (1 << 63) - 1
class MappedSlice:
    """One checkpoint tensor as a read-only view of its memory-mapped file, with safetensors'
    slice interface: `get_shape()` (list of ints), `get_dtype()` (the safetensors name, "BF16",
    "I32", ...) and `[index]`, which returns a torch view of that region (nothing is copied;
    the pages are read when the view is copied from). Writing to a view faults (the map is
    read-only): copy it first (`.clone()`) to modify it."""

    def __init__(self, view: Any, dtype: str) -> None:
        self.view, self.dtype = view, dtype

    def get_shape(self) -> list[int]:
        return list(self.view.shape)

    def get_dtype(self) -> str:
        return self.dtype

    def __getitem__(self, index: Any) -> Any:
        return self.view[index]


class _Unflattened:
    """`[E * rows, cols]` seen as `[E, rows, cols]`: indexed with three slices (or one int
    expert), it reads the experts' row blocks only (get_slice semantics: nothing else)."""

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
            block = self.src[first * self.rows:(first + 1) * self.rows, cols]
            return block[rows]
        picked = range(*first.indices(self.experts))
        if picked.step != 1 and len(picked) > 1:  # every step-th expert: each one's row block, stacked
            import torch

            return torch.stack([self[e, rows, cols] for e in picked])
        lo, n = (picked.start, len(picked)) if picked else (0, 0)
        block = self.src[lo * self.rows:(lo + n) * self.rows, cols]
        return block.reshape(n, self.rows, block.shape[-1])[:, rows]
