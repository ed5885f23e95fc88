"""compressed-tensors MXFP4 (`mxfp4-pack-quantized`, llm-compressor's MXFP4A16 / MXFP4 presets):
per expert projection `weight_packed` uint8 [out, in / 2] (two e2m1 codes a byte, low nibble =
even element) and `weight_scale` uint8 [out, in / 32] (E8M0 exponent bytes, 2^(b - 127)); no
global scale. Standard library only.

Sources (read, not copied): compressed-tensors 0.17 `compressors/mxfp4/base.py`
MXFP4PackedCompressor (NVFP4PackedCompressor's packing, `compress_mx_scale`: the scale's log2
plus 127 as uint8), `quantization/quant_scheme.py` MXFP4A16 (float, 4-bit, group, group_size 32,
symmetric, scale_dtype uint8); vLLM 0.32 `compressed_tensors.py` CompressedTensorsConfig._is_mxfp4
and `compressed_tensors_moe_w4a4_mxfp4.py` CompressedTensorsW4A4Mxfp4MoEMethod.create_weights
(w13_weight_packed / w13_weight_scale uint8, GROUP scales).
"""

from __future__ import annotations

from typing import Any

from layoutc.tools.checkpoints.errors import FormatError
from layoutc.tools.checkpoints.quant import scheme as S

FORMAT = "mxfp4-pack-quantized"
GROUP = 32


def is_mxfp4(group: Any, quant: dict[str, Any]) -> bool:
    """A config group in compressed-tensors' mxfp4-pack-quantized format."""
    return isinstance(group, dict) and (group.get("format") or quant.get("format")) == FORMAT


def read(chosen: list[tuple[str, Any]]) -> S.QuantScheme:
    """The scheme of the config groups that target the experts, all mxfp4-pack-quantized.
    FormatError LR150 for weights vLLM's _is_mxfp4 does not take (float, 4-bit, strategy group,
    group_size 32, symmetric) or activations quantized to 8 bits (W4A8: another vLLM method);
    LR151 a group without a weights object."""
    for gname, group in chosen:
        w = group.get("weights")
        if not isinstance(w, dict):
            raise FormatError("LR151", f"compressed-tensors config group {gname!r} has no weights object")
        kind = (w.get("type"), w.get("num_bits"), w.get("strategy"), w.get("group_size"))
        if kind != ("float", 4, "group", GROUP) or w.get("symmetric") is False:
            raise FormatError("LR150", f"compressed-tensors group {gname!r}: format {FORMAT} with type {kind[0]!r}, "
                              f"{kind[1]}-bit, strategy {kind[2]!r}, group_size {kind[3]} is not declared (MXFP4 is "
                              "float 4-bit, strategy group, group_size 32, symmetric: vLLM's _is_mxfp4)")
        act = group.get("input_activations")
        if isinstance(act, dict) and act.get("num_bits") == 8:
            raise FormatError("LR150", f"compressed-tensors group {gname!r}: MXFP4 weights with 8-bit activations "
                              "(vLLM's CompressedTensorsW4A8Mxfp4MoEMethod) are not declared; MXFP4 W4A16 / W4A4 is")
    return scheme()


def scheme() -> S.QuantScheme:
    """compressed-tensors MXFP4 per-expert projections (module docstring)."""
    pack = S.Packing(4, 8, (0, 1))
    weight = S.TensorSpec("weight", ".weight_packed", (("uint8", "e2m1"),), (S.Dim("out"), S.Dim("in", pack=2)),
                          pack)
    scale = S.TensorSpec("scale", ".weight_scale", S.E8M0_SCALES,
                         (S.Dim("out"), S.Dim("in", group=GROUP, exact=True)))
    return S.QuantScheme(
        name="mxfp4_ct", method="compressed-tensors", bits=4, layout="per_expert", tensors=(weight, scale),
        group_size=GROUP, decode="e2m1(code) * e8m0(weight_scale[n, k // 32])",
        source="compressed-tensors 0.17 compressors/mxfp4/base.py MXFP4PackedCompressor (pack_fp4_to_uint8: low "
        "nibble first; compress_mx_scale: log2 + 127, uint8), quant_scheme.py MXFP4A16; vLLM 0.32 "
        "compressed_tensors.py _is_mxfp4, compressed_tensors_moe_w4a4_mxfp4.py "
        "CompressedTensorsW4A4Mxfp4MoEMethod.create_weights")
