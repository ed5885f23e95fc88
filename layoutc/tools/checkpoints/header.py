"""Bounded reads of a checkpoint's JSON files and safetensors headers, without torch.

`read_json_object(path, code)` reads config.json, model.safetensors.index.json or a
`--format-file` through the same bounded reader as contracts and audit's configs
(`layoutc.compiler.safeio.read_bounded`: a regular file only, never blocking on a FIFO or
a device, at most `MAX_JSON_BYTES`), refuses JSON nested deeper than 64 levels or holding
integers of more than 30 digits (layoutc.tools.checkpoints.jsonread), and raises FormatError
with the caller's code naming the file.

`read_header(path)` parses a safetensors file's header (8-byte little-endian length, then
that many bytes of JSON: name -> {dtype, shape, data_offsets}) and checks it against the
file: the length fits the file and is at most `MAX_HEADER_BYTES`, every entry has a dtype,
a shape of non-negative integers and offsets whose span is the shape's byte size and that
end inside the file, and that the tensors' data tile the data section (no overlap, no gap,
nothing after the last: safetensors' own rule). So a truncated or corrupt file is named
(FormatError LR115) before any tensor is read. Source of the format: github.com/huggingface/safetensors (README,
"Format"). Standard library only.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from typing import Any

from layoutc.tools.checkpoints.errors import FormatError, ModelConfigError
from layoutc.tools.checkpoints.jsonread import parse_json

MAX_JSON_BYTES = 16 << 20  # config.json and index files are well under 1 MiB
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit on a header
#: the most tensors one safetensors file's header may name (counted before it is parsed, so a
#: header of a million tiny entries is refused before it costs gigabytes of Python objects; the
#: largest public checkpoints hold under 100,000 tensors in all, a few thousand per shard)
MAX_TENSORS = 200_000
#: bits per element of each safetensors dtype (sub-byte float formats pack several per byte)
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
              "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
              "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
#: safetensors dtype -> torch dtype name, for the float dtypes a run computes in
FLOAT_NAMES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor's header entry: safetensors dtype ("BF16", ...), shape, the file holding it,
    and `start` / `end`, the byte offsets of its data from the start of that file (8 + header
    length + its data offsets; the header has checked that the data ends inside the file and
    that the tensors tile the data section)."""

    dtype: str
    shape: tuple[int, ...]
    file: str
    start: int
    end: int


def _name(name: str) -> str:
    """A tensor name for a message: its repr, cut to 120 characters (a key of 10,000 segments is
    not echoed whole)."""
    text = repr(name)
    return text if len(text) <= 120 else f"{text[:100]}... ({len(name)} characters)"


def read_json_object(path: str, code: str, what: str) -> dict[str, Any]:
    """A JSON object from `path`, read within bounds.

    code: the FormatError code for any failure (LR110 config.json, LR111 an index, LR103 a
    format file); what: a phrase for the message ("config.json"). Raises FormatError(code)
    naming the file: missing, not a regular file (FIFO, device), over 16 MiB, not UTF-8,
    nested over 64 levels, an over-long integer, invalid JSON, or not an object.
    """
    from layoutc.compiler.safeio import ReadError, read_bounded

    try:
        raw = read_bounded(path, MAX_JSON_BYTES)
    except ReadError as exc:
        raise FormatError(code, f"{path}: cannot read {what}: {exc.reason}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(code, f"{path}: cannot read {what}: not UTF-8 (offset {exc.start})") from None
    try:
        return parse_json(text, path)
    except ModelConfigError as exc:
        raise FormatError(code, f"cannot read {what}: {exc}") from None


def _read_exact(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _raw_header(path: str) -> tuple[bytes, int]:
    """(header bytes, size of the data section) of a safetensors file; FormatError LR115."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FormatError("LR115", f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FormatError("LR115", f"{path}: not a regular file")
        size = info.st_size
        if size < 8:
            raise FormatError("LR115", f"{path}: truncated safetensors file ({size} bytes; the header "
                              "length alone is 8)")
        (length,) = struct.unpack("<Q", _read_exact(fd, 8))
        if length > MAX_HEADER_BYTES:
            raise FormatError("LR115", f"{path}: corrupt safetensors header: it declares {length} header "
                              f"bytes (at most {MAX_HEADER_BYTES})")
        if 8 + length > size:
            raise FormatError("LR115", f"{path}: truncated safetensors file: the header declares {length} "
                              f"bytes but the file has {size - 8} after the length")
        return _read_exact(fd, length), size - 8 - length
    except BlockingIOError:
        raise FormatError("LR115", f"{path}: reading would block") from None
    finally:
        os.close(fd)


def read_header(path: str, file: str) -> dict[str, TensorInfo]:
    """The tensors of one safetensors file, from its header (nothing else is read).

    file: the name recorded in each TensorInfo (the shard's name in its folder).
    Raises FormatError LR115 naming the file: shorter than 8 bytes, a header length past
    the file or over 100 MiB, a header that is not a JSON object, an entry without a
    known dtype / a shape of non-negative integers / two offsets, offsets whose span is
    not the shape's byte size, or data that ends past the end of the file (truncated).
    """
    import json

    raw, data_size = _raw_header(path)
    data_start = 8 + len(raw)
    entries = raw.count(b"data_offsets")  # at least one per tensor: an upper bound on the tensors
    if entries > MAX_TENSORS:
        raise FormatError("LR115", f"{path}: safetensors header names {entries} tensors or more (at most "
                          f"{MAX_TENSORS} per file)")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_compact)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError("LR115", f"{path}: corrupt safetensors header (not JSON: "
                          f"{type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise FormatError("LR115", f"{path}: corrupt safetensors header (not a JSON object)")
    out: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":  # safetensors: a map of strings to strings (HashMap<String, String>)
            values = (entry.dtype, entry.shape, entry.data_offsets) if isinstance(entry, _Entry) \
                else entry.values() if isinstance(entry, dict) else (None,)
            if not all(isinstance(v, str) for v in values):
                raise FormatError("LR115", f"{path}: corrupt safetensors header: __metadata__ must map strings "
                                  "to strings (safetensors refuses any other value)")
            continue
        out[name] = _entry(path, file, name, entry, data_size, data_start)
    _check_coverage(path, out, data_size, data_start)
    return out


def _compact(pairs: list[tuple[str, Any]]) -> Any:
    """A JSON object as json.loads builds it, but a tensor entry (`dtype`, `shape`,
    `data_offsets`) as a `_Entry` (about a third of a dict's memory: the header's objects stay
    a small multiple of its bytes)."""
    if len(pairs) == 3:
        entry = dict(pairs)
        if set(entry) == _ENTRY_KEYS:
            return _Entry(entry["dtype"], entry["shape"], entry["data_offsets"])
    return dict(pairs)


_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}


@dataclass(frozen=True, slots=True)
class _Entry:
    dtype: Any
    shape: Any
    data_offsets: Any

    def get(self, key: str) -> Any:
        return getattr(self, key)


def _check_coverage(path: str, tensors: dict[str, TensorInfo], data_size: int, data_start: int) -> None:
    """The tensors' data, in offset order, tile the data section exactly: each starts where the
    previous one ended and the last ends at the end of the file (safetensors' own rule,
    `Metadata::validate` / `read_metadata`: InvalidOffset, MetadataIncompleteBuffer). The mapped
    reader serves views at these offsets without safetensors' checks, so a file safetensors
    refuses (two names on the same bytes, a gap, bytes after the last tensor) is refused here.
    Raises FormatError LR115."""
    end = 0
    for name, info in sorted(tensors.items(), key=lambda kv: (kv[1].start, kv[1].end)):
        if info.start - data_start != end:
            what = "overlaps the tensor before it" if info.start - data_start < end else "leaves a gap before it"
            raise FormatError("LR115", f"{path}: corrupt safetensors header: tensor {_name(name)} starts at byte "
                              f"{info.start - data_start} of the data, which {what} (ends at byte {end})")
        end = info.end - data_start
    if end != data_size:
        raise FormatError("LR115", f"{path}: corrupt safetensors header: the tensors cover {end} bytes of the "
                          f"data section, which has {data_size} (bytes no tensor names)")


def _entry(path: str, file: str, name: str, entry: Any, data_size: int, data_start: int) -> TensorInfo:
    bad = f"{path}: corrupt safetensors header: tensor {_name(name)}"
    if not isinstance(entry, (dict, _Entry)):
        raise FormatError("LR115", f"{bad} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise FormatError("LR115", f"{bad} has dtype {dtype!r}; known: {', '.join(sorted(DTYPE_BITS))}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in shape):
        raise FormatError("LR115", f"{bad} has shape {shape!r} (a list of non-negative integers)")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise FormatError("LR115", f"{bad} has data_offsets {offsets!r} (two increasing integers)")
    count = 1
    for s in shape:
        count *= s
    nbytes = (count * DTYPE_BITS[dtype] + 7) // 8
    if offsets[1] - offsets[0] != nbytes:
        raise FormatError("LR115", f"{bad}: {dtype} {shape} is {nbytes} bytes but its offsets span "
                          f"{offsets[1] - offsets[0]}")
    if offsets[1] > data_size:
        raise FormatError("LR115", f"{path}: truncated safetensors file: tensor {_name(name)} ends at byte "
                          f"{offsets[1]} of the data, which has {data_size}")
    return TensorInfo(dtype, tuple(shape), file, data_start + offsets[0], data_start + offsets[1])
