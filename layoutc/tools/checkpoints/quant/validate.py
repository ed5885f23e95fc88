"""`validate`: hold one MoE layer's quantized tensors to the declared scheme before any
kernel runs, from the safetensors headers (names, dtypes, shapes); only g_idx, the scales and
FP8 weights are read, since their values are what can be wrong (indices, non-finite values).

Errors (FormatError, each naming the tensor): LR112 a required tensor is absent; LR153 a
scale, zero-point or g_idx whose shape does not match its weight; LR154 a packed tensor
with the wrong byte count; LR155 a g_idx value outside its groups (or a g_idx other than
k // group_size where the config says no act-order, which vLLM would read as k // group_size);
LR166 a GPTQ qzeros holding another value than the symmetric constant where the config says
`sym: true` (both vLLM and the reference would drop the stored zero points);
LR156 a scale that is not finite (an E8M0 byte 255, a NaN or infinite float scale); LR114
an FP8 weight byte that is NaN; LR157 the quantization_config disagrees with the
tensors (a dtype the scheme does not store, a weight sized for another bit width or packed
as another method packs it, a scale stored under another format's name, bf16 weights where
quantized ones are declared, a compressed-tensors weight_zero_point where the config says
symmetric); LR145 a compressed-tensors `weight_shape` that is not its weight's [out, in].
"""

from __future__ import annotations

from typing import Any

from layoutc.tools.checkpoints.formats import FormatError, describe
from layoutc.tools.checkpoints.moeconfig import MoEModelConfig
from layoutc.tools.checkpoints.quant import scheme as S
from layoutc.tools.checkpoints.quant.wna16 import CT_NAMES
from layoutc.tools.checkpoints.reader import Checkpoint

#: compressed-tensors pack-quantized schemes, whose compressor stores `weight_shape` beside the weight
CT_PACKED_NAMES = tuple(CT_NAMES.values())

#: safetensors dtype codes -> torch dtype names (safetensors 0.8 `get_dtype()`).
SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
}


def check_stored(scheme: S.QuantScheme, spec: S.TensorSpec, name: str, dtype: str, shape: tuple[int, ...],
                 extents: dict[str, int], experts: int | None = None) -> None:
    """One stored tensor's dtype and shape against `spec` for logical `extents`.

    experts: the leading experts dim of a fused tensor (None: per-expert).
    Raises FormatError LR157 (dtype; a weight sized for another bit width), LR154 (a packed
    weight of the wrong size), LR153 (a scale / zero / g_idx of the wrong shape).
    """
    if dtype not in spec.dtypes():
        raise FormatError("LR157", f"{name}: stored {dtype}, but quantization_config ({scheme.method}, "
                          f"{scheme.name}) stores its {spec.role} as {' or '.join(spec.dtypes())}")
    lead = () if experts is None else (experts,)
    want = lead + spec.shape(extents, name)
    if spec.scalar and shape in (lead, (*lead, 1)):
        return
    if shape == want:
        return
    if spec.role == "weight":
        other = _other_bits(scheme, spec, extents)
        if other is not None and shape == lead + other[1]:
            raise FormatError("LR157", f"{name}: shape {list(shape)} is sized for {other[0]}-bit values, but "
                              f"quantization_config says {scheme.bits}-bit ({scheme.name}: {list(want)})")
        packed_as = _other_packing(scheme, extents)
        if packed_as is not None and shape == lead + packed_as[1]:
            raise FormatError("LR157", f"{name}: shape {list(shape)} is {packed_as[0]}'s layout, but "
                              f"quantization_config says {scheme.method} ({scheme.name}: {list(want)})")
        if spec.packing is not None:
            raise FormatError("LR154", f"{name}: shape {list(shape)}, but {spec.packing.per_element} values per "
                              f"{spec.dtypes()[0]} make it {list(want)} for [out, in] = "
                              f"[{extents['out']}, {extents['in']}]")
    raise FormatError("LR153", f"{name}: shape {list(shape)} does not match its weight: {scheme.name} needs "
                      f"{list(want)} for [out, in] = [{extents['out']}, {extents['in']}]")


def _other_bits(scheme: S.QuantScheme, spec: S.TensorSpec, extents: dict[str, int]) -> tuple[int, tuple[int, ...]] \
        | None:
    """(bits, shape) of the same weight at the other declared GPTQ bit width."""
    if scheme.method != "gptq":
        return None
    other = S.gptq({4: 8, 8: 4}[scheme.bits], scheme.group_size or -1, sym=True, act_order=False)
    try:
        return other.bits, other.weight().shape(extents)
    except FormatError:
        return None


def _other_packing(scheme: S.QuantScheme, extents: dict[str, int]) -> tuple[str, tuple[int, ...]] | None:
    """(name, shape) of the same int4 weight in the other int32 packing: GPTQ packs along K
    (qweight [K / 8, N]), AWQ GEMM along N (qweight [K, N / 8]); vLLM 0.32 auto_gptq.py /
    auto_awq.py create_weights. None for any other method."""
    other = {"gptq": S.awq(-1), "awq": S.gptq(4, -1, sym=False, act_order=False)}.get(scheme.method)
    if other is None:
        return None
    try:
        return other.name, other.weight().shape(extents)
    except FormatError:
        return None


#: the scale suffixes of the declared schemes: a scale absent under one suffix but present
#: under another is a config naming another format (fp8 with / without weight_block_size,
#: compressed-tensors' weight_scale, GPTQ / AWQ scales)
SCALE_SUFFIXES = (".weight_scale_inv", ".weight_scale", ".scales", "_scales")


def weight_extents(scheme: S.QuantScheme, shape: tuple[int, ...], name: str = "weight") -> dict[str, int]:
    """Logical {"out", "in"} from a stored weight's shape (per expert). Raises FormatError
    LR154 when a split packed dim has the wrong inner size, LR153 on a wrong rank."""
    spec = scheme.weight()
    sizes = [2 if d.split else 1 for d in spec.dims]
    if len(shape) != sum(sizes):
        raise FormatError("LR153", f"{name}: rank {len(shape)}, {scheme.name} stores its weight with "
                          f"{sum(sizes)} dims")
    extents: dict[str, int] = {}
    i = 0
    for d, n in zip(spec.dims, sizes, strict=True):
        if d.axis is not None:
            if d.split:
                if shape[i + 1] != d.split // d.pack:
                    raise FormatError("LR154", f"{name}: {shape[i + 1]} bytes a block, {scheme.name} stores "
                                      f"{d.split // d.pack} ({d.split} values, {d.pack} a byte)")
                extents[d.axis] = shape[i] * d.split
            else:
                extents[d.axis] = shape[i] * d.pack
        i += n
    return extents


def validate(scheme: S.QuantScheme, ckpt: Checkpoint, layer: int, moe: MoEModelConfig | None = None) -> None:
    """Every quantized expert tensor of `layer` against `scheme`, for the model's extents.

    moe: the config's routed-expert settings (None: `describe(ckpt.config)`).
    Raises FormatError (see the module docstring): LR112, LR153-LR157, LR158.
    """
    moe = moe or describe(ckpt.config)
    fmt = moe.format
    fused = fmt.fused
    for e in [None] if fused else range(moe.num_experts):
        for proj, roles in S.tensor_names(scheme, fmt, layer, e).items():
            extents = S.projection_extents(proj, moe.hidden_size, moe.intermediate_size)
            for spec in scheme.tensors:
                name = roles[spec.role]
                if not ckpt.has(name):
                    if spec.required:
                        _missing(scheme, ckpt, name, roles)
                    continue
                sl = ckpt.slice(name)
                dtype = SAFETENSORS_DTYPES.get(sl.get_dtype(), sl.get_dtype())
                shape = tuple(int(s) for s in sl.get_shape())
                check_stored(scheme, spec, name, dtype, shape, extents, moe.num_experts if fused else None)
                if spec.role == "weight" and scheme.name in CT_PACKED_NAMES:
                    check_weight_shape(ckpt, name.removesuffix("_packed") + "_shape", extents)
                if spec.role == "g_idx":
                    check_g_idx(scheme, name, ckpt.tensor(name), extents)
                if spec.role == "zero":
                    check_zero_stored(scheme, name)
                if spec.role == "zero" and scheme.sym_qzero is not None:
                    check_sym_qzeros(scheme, spec, name, ckpt.tensor(name))
                element = spec.element(dtype) if dtype in spec.dtypes() else None
                if spec.role == "scale" and element == "e8m0":
                    check_e8m0(name, ckpt.tensor(name))
                elif spec.role in SCALE_ROLES and element in ("float", "e4m3fn"):
                    check_finite_scale(name, ckpt.tensor(name))
                elif spec.role == "weight" and element == "e4m3fn":
                    check_fp8_weight(name, ckpt.tensor(name))


def check_weight_shape(ckpt: Checkpoint, name: str, extents: dict[str, int]) -> None:
    """compressed-tensors pack-quantized's `weight_shape` (int [2], the unpacked [out, in] the
    compressor packed: compressed-tensors 0.19 compressors/pack_quantized/base.py compress stores
    `torch.tensor(weight.shape)`, and decompress unpacks to it) against the packed weight and
    config.json's extents [out, in] (`extents`). Absent: nothing to check (vLLM 0.32's
    CompressedTensorsWNA16MoEMethod registers it but decodes from the config's sizes).
    Raises FormatError LR145 naming the tensor, the expected and the stored shape (a dtype that
    is not an integer, a shape other than [2], or values other than [out, in])."""
    if not ckpt.has(name):
        return
    sl = ckpt.slice(name)
    dtype = SAFETENSORS_DTYPES.get(sl.get_dtype(), sl.get_dtype())
    dims = [int(d) for d in sl.get_shape()]
    want = [extents["out"], extents["in"]]
    if not dtype.startswith(("int", "uint")) or dims != [2]:
        raise FormatError("LR145", f"{name}: stored {dtype} {dims}, but compressed-tensors' weight_shape is an "
                          f"integer [2] holding its weight's unpacked [out, in] = {want}")
    stored = [int(v) for v in ckpt.tensor(name).reshape(-1).tolist()]
    if stored != want:
        raise FormatError("LR145", f"{name}: holds [out, in] = {stored}, but its packed weight and config.json "
                          f"give {want}: the checkpoint's weights are not the shape its config describes")


def _missing(scheme: S.QuantScheme, ckpt: Checkpoint, name: str, roles: dict[str, str]) -> None:
    weight = roles["weight"]
    base = weight[: -len(scheme.weight().suffix)]
    for plain in (base + ".weight", base):
        if ckpt.has(plain) and plain != weight:
            dtype = SAFETENSORS_DTYPES.get(ckpt.slice(plain).get_dtype(), "?")
            raise FormatError("LR157", f"{name}: absent, but quantization_config says {scheme.method} "
                              f"({scheme.name}); the checkpoint holds {plain} as {dtype} instead (its tensors "
                              "are not quantized, or in another format)")
    if name == roles.get("scale"):
        for suffix in SCALE_SUFFIXES:
            if ckpt.has(base + suffix) and base + suffix != name:
                raise FormatError("LR157", f"{name}: absent, but quantization_config says {scheme.method} "
                                  f"({scheme.name}), whose scale is {name.removeprefix(base)}; the checkpoint "
                                  f"holds {base + suffix} instead (a scale of another format: e.g. FP8 "
                                  "weight_block_size set over per-tensor or per-channel scales, or missing "
                                  "over block scales)")
    ckpt.slice(name)  # raises LR112 naming the tensor and the closest names


def check_g_idx(scheme: S.QuantScheme, name: str, g_idx: Any, extents: dict[str, int]) -> None:
    """GPTQ g_idx [in]: every value a group of the scales (0 .. groups - 1); without
    act-order it must be k // group_size, the grouping vLLM assumes (it drops g_idx).
    Raises FormatError LR155 naming the tensor and the first bad index."""
    import torch

    spec = scheme.spec("scale")
    assert spec is not None
    groups = spec.shape(extents, name)[0]
    g = g_idx.to(torch.int64).reshape(-1)
    bad = ((g < 0) | (g >= groups)).nonzero()
    if bad.numel():
        k = int(bad[0, 0])
        raise FormatError("LR155", f"{name}[{k}] = {int(g[k])} is outside the {groups} groups of its scales "
                          f"(0..{groups - 1})")
    if not scheme.act_order and scheme.group_size and scheme.group_size > 0:
        want = torch.arange(g.numel()) // scheme.group_size
        off = (g != want).nonzero()
        if off.numel():
            k = int(off[0, 0])
            raise FormatError("LR155", f"{name}[{k}] = {int(g[k])}, but desc_act is false: input channel {k} is "
                              f"in group {int(want[k])} (k // {scheme.group_size}), which is how vLLM reads it")


def check_zero_stored(scheme: S.QuantScheme, name: str) -> None:
    """A stored zero-point tensor `name` where the scheme's zero is implicit and no stored one is
    admitted (compressed-tensors pack-quantized with `symmetric: true`: its compressor writes
    `weight_zero_point` only for asymmetric weights, compressed-tensors 0.17 / 0.19
    compressors/pack_quantized/base.py compress_weight / _remove_symmetric_zp; vLLM's uint4b8 /
    uint8b128 read none, and neither does the reference). Its zero points would be dropped on both
    sides. GPTQ's symmetric qzeros are held to their constant instead (check_sym_qzeros).
    Raises FormatError LR157 naming the tensor and the config key it contradicts."""
    if scheme.zero == "implicit" and scheme.sym_qzero is None:
        raise FormatError("LR157", f"{name}: stored, but quantization_config ({scheme.method}, {scheme.name}) "
                          "says symmetric weights, whose zero point is implicit "
                          f"({scheme.zero_point}) and stored nowhere; vLLM and the reference would drop "
                          "these zero points: refusing an asymmetric checkpoint whose config says symmetric "
                          "(set symmetric false if its zero points are meant)")


def check_sym_qzeros(scheme: S.QuantScheme, spec: S.TensorSpec, name: str, qzeros: Any) -> None:
    """GPTQ symmetric: the zero point is implicit (2^(bits - 1)); vLLM's uint4b8 / uint8b128 kernels
    (auto_gptq.py, moe_wna16.py) never read qzeros, and neither does the reference. A checkpoint
    that stores qzeros must then hold the symmetric constant `scheme.sym_qzero` in every slot
    (GPTQModel / AutoGPTQ pack z - 1 = 7 / 127 in the v1 "gptq" format, z = 8 / 128 in
    "gptq_v2"); any other value is an asymmetric checkpoint whose quantization_config says
    `sym: true`, and both sides would compute another layer than the model's.

    qzeros: the stored int32 words [groups, out / pack] (a leading experts dim allowed).
    Raises FormatError LR166 naming the tensor, the first other slot, its value and the config key.
    Source: vLLM 0.32 auto_gptq.py AutoGPTQConfig.TYPE_MAP ((bits, sym true) -> uint4b8 / uint8b128, whose
    zero is the type's fixed bias); GPTQModel's v1 / v2 checkpoint formats (z - 1 / z in qzeros)."""
    from layoutc.tools.checkpoints.quant.unpack import unpack  # torch: validate imports without it

    want = scheme.sym_qzero
    assert want is not None and spec.packing is not None
    values = unpack(spec, qzeros)
    off = values != want
    if bool(off.any()):
        first = off.nonzero()[0]
        where = ", ".join(str(int(i)) for i in first)
        zp = scheme.zero_point
        stored = f"v1 format: its implicit zero {zp} - 1" if want != zp else "gptq_v2 format: its implicit zero"
        raise FormatError("LR166", f"{name}: unpacked slot [{where}] holds {int(values[tuple(first)])} "
                          f"({int(off.sum())} of its {off.numel()} zero points are not {want}), but "
                          f"quantization_config.sym is true: a symmetric {scheme.bits}-bit GPTQ checkpoint "
                          f"stores {want} in every qzeros slot ({stored}); vLLM reads sym as uint{scheme.bits}b{scheme.zero_point} "
                          "(a fixed zero) and would drop these zero points, as the reference would; refusing an asymmetric checkpoint whose config says sym (set sym "
                          "false if its zero points are meant)")


def check_e8m0(name: str, scales: Any) -> None:
    """E8M0 scale bytes: 255 is NaN (OCP MX v1.0 5.4). Raises FormatError LR156 naming the
    tensor, the first such byte's index and how many there are."""
    import torch

    raw = scales.view(torch.uint8) if scales.dtype != torch.uint8 else scales
    nan = (raw == 0xFF).nonzero()
    if nan.numel():
        where = ", ".join(str(int(i)) for i in nan[0])
        raise FormatError("LR156", f"{name}[{where}] is the E8M0 byte 255, which decodes to NaN "
                          f"({nan.shape[0]} of its bytes are 255)")


#: the roles whose values multiply the decoded codes (a non-finite one makes every value it scales NaN)
SCALE_ROLES = ("scale", "global_scale", "input_scale")


def _first(bad: Any) -> str:
    return ", ".join(str(int(i)) for i in bad.nonzero()[0])


def check_finite_scale(name: str, scales: Any) -> None:
    """Float (or float8_e4m3fn) scales must be finite: a NaN or an infinity makes every weight it
    scales NaN, and the run would only show a mismatch. Raises FormatError LR156 naming the
    tensor, the first such entry's index and how many there are."""
    import torch

    bad = ~torch.isfinite(scales.to(torch.float32))
    if bool(bad.any()):
        raise FormatError("LR156", f"{name}[{_first(bad)}] is {float(scales[tuple(bad.nonzero()[0])])}: a scale "
                          f"that is not finite ({int(bad.sum())} of its {scales.numel()} entries)")


def check_fp8_weight(name: str, weight: Any) -> None:
    """float8_e4m3fn weight bytes 0x7F / 0xFF are NaN (E4M3FN has no infinity). Raises FormatError
    LR114 naming the tensor, the first such byte's index and how many there are."""
    import torch

    raw = weight.view(torch.uint8)
    bad = (raw & 0x7F) == 0x7F
    if bool(bad.any()):
        raise FormatError("LR114", f"{name}[{_first(bad)}] is a float8_e4m3fn NaN byte (0x{int(raw[tuple(bad.nonzero()[0])]):02X}; "
                          f"{int(bad.sum())} of its bytes): the checkpoint is damaged")

