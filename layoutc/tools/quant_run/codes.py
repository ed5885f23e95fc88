"""A GPTQ / AWQ int4 expert's own integer codes, in the terms of the torch_int4pack_gptq_moe
contract: per projection, int32 codes `[out, in]`, scales and int4pack zeros `[out, in / g]`.

GPTQ and AWQ decode a group's weight as `(q - z) * s` (GPTQ: z implicit 8 when
symmetric, else qzeros + 1 in the v1 checkpoint format; AWQ: qzeros). torch's int4pack
kernel decodes `(q - 8) * scale + zero`, so the codes pass through unchanged with
scale = s and zero = (8 - z) * s: the same value, not a requantization. GPTQ int8
(quant_run/rank8.py, torch_int8pack_gptq_moe) reads the same codes (0..255) and scales
[out, 1] (channelwise); its `zero` is not used (the kernel takes q - 128).

Act-order (GPTQ desc_act: `g_idx[k]` is the group of input channel k, a permutation of
whole groups): the kernel needs each group's channels contiguous along K, so each
projection's input channels are taken in `argsort(g_idx)` order, which is `k // g` after
sorting (checked: LR155 otherwise). For gate and up (K = hidden) the hidden states are
gathered in that order before the matmul (`ProjectionCodes.in_perm`); for down (K = the
intermediate dim) the same permutation is applied to gate's and up's rows, which leaves
the expert's function unchanged (the intermediate dim is internal to it).

Unpacking and decoding are checkpoints/quant/dequant.py's `unpack` (held to vLLM's own
unpackers in tests/tools/test_quant_formats.py). Source: vLLM 0.32 auto_gptq.py / auto_awq.py
(tensor shapes), torch 2.13 aten/src/ATen/native/cpu/int4mm_kernel.cpp (the decode).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import torch

from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.quant.unpack import unpack
from layoutc.tools.checkpoints.quant.validate import check_g_idx, weight_extents
from layoutc.tools.checkpoints.reader import Checkpoint

#: The methods whose codes run on the int4pack kernel (4-bit, integer zero points).
INT4PACK_SCHEMES = ("gptq_int4", "awq_int4", "ct_wna16_int4")


class PackedCodes:
    """One projection's int32 codes [out, in] as a slice object (`get_shape()`, `get_dtype()` "I32",
    `[index]`) over its stored packed weight (a checkpoint `MappedSlice`): indexing a region reads only
    the stored elements that hold it (the whole packs along the packed dim, the region's rows or
    columns along the other) and unpacks only those (`unpack`), so a rank's generated `load`, which
    indexes only the rank's slice, reads and unpacks that slice and nothing else (issue 44 item 2).
    `full()` is every code, as `unpack` of the whole tensor gives them. Stored dims: `spec.dims`, two,
    none split (GPTQ / AWQ / compressed-tensors int4 and int8), no experts dim."""

    def __init__(self, stored: object, spec: S.TensorSpec, extents: dict[str, int]) -> None:
        self._stored, self._spec = stored, spec
        self._axes = tuple(str(d.axis) for d in spec.dims)
        self._packs = tuple(d.pack for d in spec.dims)
        self._extents = extents
        self.shape = torch.Size((extents["out"], extents["in"]))

    def get_shape(self) -> list[int]:
        return list(self.shape)

    def get_dtype(self) -> str:
        return "I32"

    def full(self) -> torch.Tensor:
        """Every code, int32 [out, in]."""
        return self[:, :]

    def __getitem__(self, index: object) -> torch.Tensor:
        parts = index if isinstance(index, tuple) else (index,)
        if parts == (Ellipsis,):
            parts = (slice(None), slice(None))
        if len(parts) != 2 or not all(isinstance(p, slice) for p in parts):
            raise TypeError(f"packed codes are indexed with two slices, not {index!r}")
        want = {"out": parts[0], "in": parts[1]}
        reads, trims = [], []
        for axis, pack in zip(self._axes, self._packs, strict=True):
            lo, hi, step = want[axis].indices(self._extents[axis])
            if step != 1:
                raise TypeError(f"packed codes are indexed with unit-step slices, not {index!r}")
            hi = max(lo, hi)
            first, last = lo // pack, -(-hi // pack)
            reads.append(slice(first, last))
            trims.append(slice(lo - first * pack, hi - first * pack))
        stored = self._stored[tuple(reads)]  # type: ignore[index]
        codes = unpack(self._spec, stored)[tuple(trims)]
        return _out_in(codes, self._spec).to(torch.int32).contiguous()


@dataclass(frozen=True)
class ProjectionCodes:
    """One projection of one expert. codes int32 [out, in] in 0..15 (a tensor, or `PackedCodes`
    that read only the region a loader indexes); scale / zero float32 [out, in / g] (zero is
    int4pack's: (8 - z) * s); in_perm int64 [in] or None: the input channel each column of
    `codes` reads (act-order), None for the identity."""

    codes: torch.Tensor | PackedCodes
    scale: torch.Tensor
    zero: torch.Tensor
    in_perm: torch.Tensor | None = None

    def rows(self, perm: torch.Tensor) -> ProjectionCodes:
        """The same projection with its output rows (and their scales and zeros) in `perm` order."""
        codes = self.codes.full() if isinstance(self.codes, PackedCodes) else self.codes
        return ProjectionCodes(codes[perm], self.scale[perm], self.zero[perm], self.in_perm)


@dataclass(frozen=True)
class ExpertCodes:
    """gate and up: [I, H] codes; down: [H, I] codes with the intermediate in gate's row order."""

    gate: ProjectionCodes
    up: ProjectionCodes
    down: ProjectionCodes


def _out_in(t: torch.Tensor, spec: S.TensorSpec) -> torch.Tensor:
    """A stored 2-D tensor (after unpacking) as [out, in-or-groups]."""
    return t if spec.dims[0].axis == "out" else t.T


def _stored(ckpt: Checkpoint, names: dict[str, str], scheme: S.QuantScheme) -> dict[str, torch.Tensor]:
    """The projection's stored tensors by role, read whole; the packed weight as the checkpoint's
    slice object (read by region) where its codes can be read by region (`_by_region`)."""
    lazy = _by_region(scheme)
    return {spec.role: ckpt.slice(names[spec.role]) if lazy and spec.role == "weight" else ckpt.tensor(names[spec.role])
            for spec in scheme.tensors if spec.role in names and ckpt.has(names[spec.role])}


def _by_region(scheme: S.QuantScheme) -> bool:
    """Codes read by region (`PackedCodes`): a packed two-dim weight with no split dim, and no
    act-order (whose column permutation needs every code of a projection)."""
    spec = scheme.weight()
    return (spec.packing is not None and len(spec.dims) == 2 and not any(d.split for d in spec.dims)
            and not scheme.act_order)


def _in_order(scheme: S.QuantScheme, name: str, g_idx: torch.Tensor | None, k: int) -> torch.Tensor | None:
    """The act-order column order (argsort of g_idx), or None when channels are already in groups.
    Raises FormatError LR155 when the sorted groups are not runs of group_size channels."""
    if g_idx is None or not scheme.act_order:
        return None
    g = g_idx.to(torch.int64).reshape(-1)
    perm = torch.sort(g, stable=True).indices
    size = int(scheme.group_size or k)
    want = torch.arange(k) // size
    off = (g[perm] != want).nonzero()
    if off.numel():
        j = int(off[0, 0])
        raise FormatError("LR155", f"{name}: act-order groups are not runs of {size} channels (sorted position {j} "
                          f"is in group {int(g[perm][j])}, not {int(want[j])}); torch's int4pack kernel needs "
                          "each group's channels contiguous")
    return None if bool((perm == torch.arange(k)).all()) else perm


def projection_codes(scheme: S.QuantScheme, stored: dict[str, torch.Tensor], name: str) -> ProjectionCodes:
    """One projection's ProjectionCodes from its stored tensors (by role: weight, scale, zero, g_idx).

    Shapes and dtypes are held to the scheme first (validate.py; FormatError LR153/LR154/LR157,
    LR155 for a g_idx outside its groups). Returns float32 scales and zeros; the codes as a tensor,
    or as `PackedCodes` (read by region) when `stored["weight"]` is a slice object and the scheme's
    codes can be read by region (`_by_region`).
    """
    wspec, sspec, zspec = scheme.weight(), scheme.spec("scale"), scheme.spec("zero")
    assert sspec is not None
    weight = stored["weight"]
    shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else tuple(weight.get_shape())  # type: ignore[attr-defined]
    extents = weight_extents(scheme, shape, name + wspec.suffix)
    g_idx = stored.get("g_idx")
    if g_idx is not None:
        check_g_idx(scheme, name + ".g_idx", g_idx, extents)
    if not isinstance(weight, torch.Tensor) and _by_region(scheme):  # read by region, when a loader indexes it
        codes: torch.Tensor | PackedCodes = PackedCodes(weight, wspec, extents)
    else:
        whole = weight if isinstance(weight, torch.Tensor) else weight[...]  # type: ignore[index]
        codes = _out_in(unpack(wspec, whole), wspec).to(torch.int32)
    scale = _out_in(stored["scale"].to(torch.float32), sspec)
    if scheme.zero == "implicit":
        z = torch.full_like(scale, float(scheme.zero_point))
    else:
        assert zspec is not None
        z = _out_in(unpack(zspec, stored["zero"]).to(torch.float32) + scheme.zero_offset, zspec)
    perm = _in_order(scheme, name + ".g_idx", g_idx, extents["in"])
    if isinstance(codes, PackedCodes):
        assert perm is None  # _by_region: no act-order
        return ProjectionCodes(codes, scale.contiguous(), ((8 - z) * scale).contiguous(), None)
    if perm is not None:
        codes = codes[:, perm]
    return ProjectionCodes(codes.contiguous(), scale.contiguous(), ((8 - z) * scale).contiguous(), perm)


def expert_codes(ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layer: int, expert: int) -> ExpertCodes:
    """gate, up and down of `expert` in `layer`, read from the checkpoint (per-expert GPTQ / AWQ modules).

    With act-order on down, gate's and up's rows follow down's column order. Raises FormatError
    LR112 for a missing tensor, and as `projection_codes`.
    """
    names = S.tensor_names(scheme, moe.format, layer, expert)
    proj = {p: projection_codes(scheme, _stored(ckpt, names[p], scheme), names[p]["weight"].rsplit(".", 1)[0])
            for p in ("gate", "up", "down")}
    down = proj["down"]
    if down.in_perm is None:
        return ExpertCodes(proj["gate"], proj["up"], down)
    perm = down.in_perm
    return ExpertCodes(proj["gate"].rows(perm), proj["up"].rows(perm),
                       ProjectionCodes(down.codes, down.scale, down.zero, None))


class LayerCodes(Sequence[ExpertCodes]):
    """The experts of one layer as a sequence whose item e is `expert_codes(ckpt, moe, scheme,
    layer, e)`, read from the checkpoint each time it is asked for and not kept: a rank's loader
    holds one expert's codes at a time (issue 44 item 2), never the layer's."""

    def __init__(self, ckpt: Checkpoint, moe: MoEModelConfig, scheme: S.QuantScheme, layer: int) -> None:
        self._args = (ckpt, moe, scheme, layer)

    def __len__(self) -> int:
        return int(self._args[1].num_experts)

    @overload
    def __getitem__(self, index: int) -> ExpertCodes: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ExpertCodes]: ...

    def __getitem__(self, index: int | slice) -> ExpertCodes | Sequence[ExpertCodes]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        ckpt, moe, scheme, layer = self._args
        return expert_codes(ckpt, moe, scheme, layer, index % len(self))
