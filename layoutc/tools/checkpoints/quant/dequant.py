"""An independent dequantizer: a projection's stored tensors -> its float32 `[out, in]` weight.

Written from the formats' specifications as `QuantScheme` declares them (scheme.py), one
generic path for every method: unpack the packed codes in the declared bit order, decode
each element through layoutc/runtime/numformats.py's tables (E4M3FN bytes, E2M1 nibbles,
E8M0 scale bytes: torch lookup tables built from those functions, not torch's float8
casts), subtract the zero point (implicit, or the stored one plus its offset), and
multiply by the scale, each broadcast to `[out, in]` through its groups (`k // group`,
GPTQ's `g_idx[k]`, FP8's `n // block_n, k // block_k` with a ragged last block); NVFP4's
per-tensor global scale multiplies the block scale (ModelOpt `weight_scale_2`) or divides it
(compressed-tensors `weight_global_scale`) before the codes are scaled.

tests/tools/test_quant_formats.py holds it to vLLM's and transformers' own unpackers and
dequantizers.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import torch

from layoutc.runtime.numformats import e2m1, e4m3fn, e8m0
from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.quant.unpack import unpack
from layoutc.tools.checkpoints.quant.validate import (
    check_e8m0,
    check_g_idx,
    check_stored,
    check_sym_qzeros,
    check_zero_stored,
    weight_extents,
)


@cache
def _table(fmt: str) -> torch.Tensor:
    """float32 value of every code of `fmt` (NaN where numformats says not finite)."""
    if fmt == "e2m1":
        return torch.tensor([float(e2m1(n)) for n in range(16)], dtype=torch.float32)
    decode = {"e4m3fn": e4m3fn, "e8m0": e8m0}[fmt]
    values = [decode(b) for b in range(256)]
    return torch.tensor([float("nan") if v is None else float(v) for v in values], dtype=torch.float32)


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _to_out_in(t: torch.Tensor, spec: S.TensorSpec) -> torch.Tensor:
    axes = [d.axis for d in spec.dims]
    return t if axes == ["out", "in"] else t.transpose(-1, -2)


def _expand(t: torch.Tensor, spec: S.TensorSpec, extents: dict[str, int], g_idx: torch.Tensor | None) -> torch.Tensor:
    """A grouped tensor (decoded scales or zeros, stored dims) broadcast to [out, in]."""
    if spec.scalar:
        return t.reshape(()).expand(extents["out"], extents["in"])
    for p, d in enumerate(spec.dims):
        assert d.axis is not None
        n = extents[d.axis]
        if d.group == -1:
            idx = torch.zeros(n, dtype=torch.int64)
        elif d.group > 0:
            idx = g_idx.to(torch.int64) if d.axis == "in" and g_idx is not None else torch.arange(n) // d.group
        else:
            idx = torch.arange(n)
        t = t.index_select(p, idx)
    return _to_out_in(t, spec)


def _decode(spec: S.TensorSpec, stored: torch.Tensor) -> torch.Tensor:
    """Element values (float32) of an unpacked tensor, by its declared element format."""
    element = spec.element(_dtype_name(stored))
    codes = unpack(spec, stored)
    if element in ("e4m3fn", "e2m1", "e8m0"):
        return _table(element)[codes.to(torch.int64)]
    return codes.to(torch.float32)  # a float scale's value; uintN codes are exact in float32


def dequantize(scheme: S.QuantScheme, tensors: Mapping[str, torch.Tensor], *, name: str = "") -> torch.Tensor:
    """One projection's weight, float32 `[out, in]` (`[E, out, in]` when the weight carries a
    leading experts dim, as gpt-oss's fused tensors do).

    tensors: by role ("weight", "scale", "zero", "g_idx", "global_scale"), as stored (dtypes and shapes of
    the scheme's TensorSpecs); name: the projection's module name, for messages. `[out, in]`
    follows the stored rows: gpt-oss's gate_up rows stay interleaved (gate, up) pairs.
    Raises FormatError: LR112 a required role is missing; LR153 / LR154 / LR157 shapes or
    dtypes the scheme does not declare; LR155 a g_idx out of range; LR156 an E8M0 scale of 255;
    LR166 a GPTQ qzeros other than the symmetric constant where the config says sym; LR157 a stored
    zero point where the scheme's zero is implicit (compressed-tensors symmetric).
    """
    wspec = scheme.weight()
    weight = tensors["weight"]
    per = sum(2 if d.split else 1 for d in wspec.dims)
    if weight.dim() == per + 1:
        return torch.stack([dequantize(scheme, {r: t[e] for r, t in tensors.items()}, name=f"{name}[{e}]")
                            for e in range(weight.shape[0])])
    extents = weight_extents(scheme, tuple(weight.shape), name + wspec.suffix)
    for spec in scheme.tensors:
        t = tensors.get(spec.role)
        if t is None:
            if spec.required and spec.role != "input_scale":
                raise FormatError("LR112", f"{name}{spec.suffix}: {scheme.name} needs its {spec.role} tensor")
            continue
        check_stored(scheme, spec, name + spec.suffix, _dtype_name(t), tuple(t.shape), extents)
    g_idx = tensors.get("g_idx")
    if g_idx is not None:
        check_g_idx(scheme, name + ".g_idx", g_idx, extents)
    zspec = scheme.spec("zero")
    if zspec is not None and tensors.get("zero") is not None:
        check_zero_stored(scheme, name + zspec.suffix)  # LR157: a stored zero point under symmetric
    if scheme.sym_qzero is not None and zspec is not None and tensors.get("zero") is not None:
        check_sym_qzeros(scheme, zspec, name + zspec.suffix, tensors["zero"])  # LR166: qzeros vs sym
    sspec = scheme.spec("scale")
    assert sspec is not None
    scale_t = tensors["scale"]
    if sspec.element(_dtype_name(scale_t)) == "e8m0":
        check_e8m0(name + sspec.suffix, scale_t)
    values = _to_out_in(_decode(wspec, weight), wspec)
    if scheme.zero == "implicit":
        values = values - scheme.zero_point
    elif scheme.zero == "stored":
        zspec = scheme.spec("zero")
        assert zspec is not None
        zero = unpack(zspec, tensors["zero"]).to(torch.float32) + scheme.zero_offset
        values = values - _expand(zero, zspec, extents, g_idx)
    scale = _expand(_decode(sspec, scale_t), sspec, extents, g_idx)
    gspec = scheme.spec("global_scale")
    if gspec is not None:  # NVFP4's second level, folded into the block scale first (as vLLM and CT do)
        glob = tensors["global_scale"].to(torch.float32).reshape(())
        scale = scale / glob if scheme.global_inverse else scale * glob
    return values * scale
