"""Weight-only integer experts from the community packers: compressed-tensors `pack-quantized`
(llm-compressor's W4A16 / W8A16 presets, any group size or channelwise) and auto-round's native
format (`quant_method: auto-round`). Standard library only (config.py calls it from `layoutc audit`'s
config reader).

compressed-tensors `pack-quantized`, symmetric int (compressed-tensors 0.17 / 0.19
`compressors/pack_quantized/helpers.py` pack_to_int32: the signed code q in [-2^(b-1), 2^(b-1))
is stored as q + 2^(b-1), 32 / b values an int32 along the input dim, value j of a word at bits
[j * b, (j + 1) * b); `compressors/pack_quantized/base.py`: `weight_packed` int32 [out, in * b / 32],
`weight_scale` [out, groups] in the model dtype, `weight_shape` int64 [2]). Decode:
(code - 2^(b-1)) * weight_scale[n, k // g], which is vLLM 0.32's reading
(compressed_tensors_moe_wna16.py CompressedTensorsWNA16MoEMethod: quant_type WNA16_SUPPORTED_TYPES_MAP
{4: uint4b8, 8: uint8b128}; get_weight_shape: N-first [E, N, K / pack], scales [E, N, G]).
The codes are GPTQ's (uint4b8 / uint8b128) with [out, in] stored N-first: `weight_packed.T` is a
GPTQ `qweight`, word for word, and `weight_scale.T` its `scales` (vLLM 0.32's CPU backend,
int_wna16._process_weights_cpu, transposes them exactly so and runs them as GPTQ).

auto-round's native format, `packing_format` "auto_round:auto_gptq" (its default for int): GPTQ's
v1 tensors (`qweight` [in / pack, out], `qzeros` [groups, out / pack] holding z - 1, `scales`
[groups, out]); vLLM 0.32 reads it as GPTQ (quantization/inc/schemes/inc_wna16_scheme.py
_resolve_gptq_moe: AutoGPTQMoEMethod with desc_act false for sym 4 / 8 bits, MoeWNA16Method
otherwise; INCConfig.override_quantization_method maps "auto-round" to "inc").

Refused by name (FormatError LR150): asymmetric compressed-tensors weights (stored
`weight_zero_point`), activation ordering (`actorder`, a `weight_g_idx`), bit widths other than
4 and 8, strategies other than group / channel, auto-round packings other than auto_gptq, and
auto-round data types other than int. LR151: malformed values (a `symmetric` that is not a JSON
boolean: compressed-tensors' pydantic would read the string "false" as False; absent, it is
QuantizationArgs' default, true). A stored `weight_zero_point` under a symmetric config is refused
by validate.py (LR157).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from layoutc.tools.checkpoints.errors import FormatError
from layoutc.tools.checkpoints.quant import scheme as S

#: compressed-tensors formats whose int weights are packed into int32 words (vLLM 0.32
#: CompressedTensorsConfig._is_wNa16_group_channel takes "pack-quantized" for WNA16).
CT_PACKED = "pack-quantized"
#: layoutc's scheme names for compressed-tensors int weights, by bits.
CT_NAMES = {4: "ct_wna16_int4", 8: "ct_wna16_int8"}
AUTO_ROUND_PACKINGS = ("auto_round:auto_gptq", "auto_round:gptq")

_CT_SRC = (
    "compressed-tensors 0.19 compressors/pack_quantized/helpers.py pack_to_int32 (q + 2^(b-1), "
    "value j at bits j*b, packed along the last dim), base.py (weight_packed, weight_scale, weight_shape); "
    "vLLM 0.32 compressed_tensors_moe_wna16.py CompressedTensorsWNA16MoEMethod.get_weight_shape "
    "(w13_weight [E, 2I, H / pack] int32, w13_scale [E, 2I, G]), WNA16_SUPPORTED_TYPES_MAP (uint4b8, "
    "uint8b128); oracle/int_wna16.py _process_weights_cpu (N-first -> K-first, run as GPTQ)"
)


def ct_wna16(bits: int, group_size: int) -> S.QuantScheme:
    """compressed-tensors pack-quantized symmetric int `bits` (4 or 8) weights, per expert module:
    `.weight_packed` int32 [out, in / (32 / bits)], `.weight_scale` float [out, ceil(in / g)]
    ([out, 1] channelwise: group_size -1). The implicit zero is 2^(bits - 1) (8 / 128). The optional
    `.weight_zero_point` [out / (32 / bits), groups] (pack_to_int32 along dim 0) is what an asymmetric
    checkpoint adds; read_ct_int refuses those, so it is declared for its layout only."""
    pack = S.Packing(bits, 32, tuple(range(32 // bits)))
    tensors = (
        S.TensorSpec(
            "weight",
            ".weight_packed",
            (("int32", f"uint{bits}"),),
            (S.Dim("out"), S.Dim("in", pack=pack.per_element)),
            pack,
        ),
        S.TensorSpec("scale", ".weight_scale", S.FLOAT_SCALES, (S.Dim("out"), S.Dim("in", group=group_size))),
        # asymmetric checkpoints only (refused by read_ct_int); a symmetric one stores none and vLLM reads none
        S.TensorSpec(
            "zero",
            ".weight_zero_point",
            (("int32", f"uint{bits}"),),
            (S.Dim("out", pack=pack.per_element), S.Dim("in", group=group_size)),
            pack,
            required=False,
        ),
    )
    zp = 1 << (bits - 1)
    return S.QuantScheme(
        name=CT_NAMES[bits],
        method="compressed-tensors",
        bits=bits,
        layout="per_expert",
        tensors=tensors,
        decode=f"(code - {zp}) * weight_scale[n, {'0' if group_size == -1 else f'k // {group_size}'}]",
        source=_CT_SRC,
        group_size=group_size,
        zero="implicit",
        zero_point=zp,
    )


def is_ct_int(group: Any, quant: dict[str, Any]) -> bool:
    """A compressed-tensors config group whose weights are integers (any format): this module's to
    read or to refuse by name."""
    w = group.get("weights") if isinstance(group, dict) else None
    return (
        isinstance(w, dict)
        and w.get("type") == "int"
        and (group.get("format") or quant.get("format")) != "int-quantized"
    )


def read_ct_int(chosen: list[tuple[str, Any]], quant: dict[str, Any]) -> S.QuantScheme:
    """The scheme of the config groups that target the experts, all int weights. Raises FormatError
    LR150 (named: a format, bit width, strategy, asymmetric or act-ordered weights, quantized
    activations, or groups that disagree) and LR151 (a malformed value)."""
    kinds = set()
    for gname, group in chosen:
        w = group.get("weights")
        fmt = group.get("format") or quant.get("format")
        bits, strategy, size = w.get("num_bits"), w.get("strategy"), w.get("group_size")
        # QuantizationArgs.num_bits: int, parsed by pydantic in lax mode: 4.0 is 4, 4.5 an error
        if isinstance(bits, float) and bits.is_integer():
            bits = int(bits)
        elif isinstance(bits, bool) or (bits is not None and not isinstance(bits, int)):
            raise FormatError("LR151", f"compressed-tensors group {gname!r}: num_bits {bits!r} is not an integer")
        what = f"compressed-tensors group {gname!r}: int {bits}-bit, strategy {strategy!r}, format {fmt!r}"
        if fmt != CT_PACKED:
            raise FormatError(
                "LR150",
                f"{what} is not declared (int weights are declared in format {CT_PACKED!r}: "
                "llm-compressor's W4A16 / W8A16)",
            )
        if bits not in CT_NAMES:
            raise FormatError(
                "LR150", f"{what} is not declared (4 and 8 bits are: vLLM 0.32's WNA16_SUPPORTED_TYPES_MAP)"
            )
        # absent: compressed-tensors' default, QuantizationArgs.symmetric: bool = True (0.17 / 0.19
        # quantization/quant_args.py); a string such as "false" its pydantic reads as False: refused unread
        sym = w.get("symmetric", True)
        if not isinstance(sym, bool):
            raise FormatError("LR151", f"{what}: symmetric {sym!r} is not true/false")
        if not sym:
            raise FormatError(
                "LR150",
                f"{what}: asymmetric weights (a stored weight_zero_point) are not declared; "
                "symmetric ones are (W4A16, W8A16)",
            )
        if w.get("actorder") not in (None, False):
            raise FormatError("LR150", f"{what}: actorder {w.get('actorder')!r} (a weight_g_idx) is not declared")
        if w.get("dynamic") not in (None, False):
            raise FormatError("LR150", f"{what}: dynamic weight scales are not declared")
        act = group.get("input_activations")
        if act is not None:
            raise FormatError(
                "LR150",
                f"{what}: quantized input activations ({act!r}) are not declared; weight-only (W4A16 / W8A16) is",
            )
        if strategy == "channel":
            g = -1
        elif strategy == "group":
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise FormatError("LR151", f"{what}: group_size {size!r} is not a positive integer")
            g = size
        else:
            raise FormatError("LR150", f"{what} is not declared (strategies group and channel are)")
        kinds.add((bits, g))
    if len(kinds) != 1:
        raise FormatError(
            "LR150",
            f"compressed-tensors config groups {', '.join(n for n, _ in chosen)} quantize the "
            "experts differently; one scheme for all experts is declared",
        )
    bits, g = kinds.pop()
    return ct_wna16(bits, g)


def read_auto_round(quant: dict[str, Any]) -> S.QuantScheme:
    """auto-round's native int format as the GPTQ scheme it stores (module docstring), named by its
    method. Raises FormatError LR150 (a packing, data type or bit width not declared) and LR151."""
    packing = quant.get("packing_format") or AUTO_ROUND_PACKINGS[0]
    if packing not in AUTO_ROUND_PACKINGS:
        raise FormatError(
            "LR150",
            f"auto-round packing_format {packing!r} is not declared (declared: "
            f"{', '.join(AUTO_ROUND_PACKINGS)}: GPTQ v1 tensors)",
        )
    data_type = quant.get("data_type", "int")
    if data_type not in ("int", None):
        raise FormatError("LR150", f"auto-round data_type {data_type!r} is not declared (int is)")
    bits = quant.get("bits")
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise FormatError("LR151", f"quantization_config.bits = {bits!r} is not an integer (weight bits)")
    if bits not in (4, 8):
        raise FormatError(
            "LR150",
            f"auto-round {bits}-bit is not declared (4 and 8 bits are: vLLM 0.32 reads them "
            "as GPTQ uint4b8 / uint8b128)",
        )
    group = quant.get("group_size")
    if isinstance(group, bool) or not isinstance(group, int) or (group != -1 and group < 1):
        raise FormatError("LR151", f"quantization_config.group_size = {group!r} is not -1 or a positive integer")
    sym = quant.get("sym", True)
    if not isinstance(sym, bool):
        raise FormatError("LR151", f"quantization_config.sym = {sym!r} is not true/false")
    gptq = S.gptq(bits, group, sym=sym, act_order=False, v2=False)
    return replace(
        gptq,
        method="auto-round",
        source=gptq.source + "; auto-round 0.16.1 export/export_to_autoround "
        "(packing_format auto_round:auto_gptq); vLLM 0.32 inc/schemes/inc_wna16_scheme.py _resolve_gptq_moe",
    )
