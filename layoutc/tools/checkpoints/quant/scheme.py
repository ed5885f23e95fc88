"""Quantized expert formats, declared as data: which tensors one projection of one expert
is stored as, their dtypes, shapes, packing, scale and zero-point granularity, and how the
stored codes decode. Standard library only.

A projection has logical extents `[out, in]` (the contract's order: gate/up `[I, H]`,
down `[H, I]`, gpt-oss's fused gate_up `[2I, H]`). Each stored tensor lists its dims in
stored order (`Dim`), each a function of one logical extent: its length, packed
(`pack` values per storage element, `Packing` says in which bit order), or grouped
(one entry per `group` values, rounded up; -1: one for the whole axis). A quantized
tensor's orientation is its dims, never `CheckpointFormat.transposed` (which describes the
bf16 tensors: gpt-oss stores bf16 experts `[E, in, out]` but MXFP4 blocks `[E, out, ...]`).

Roles are the contracts' tensor roles: `weight` (the codes), `scale`, `zero` (zero points),
`g_idx` (GPTQ's input-channel -> group map), `input_scale` (a static FP8 / NVFP4 activation
scale, which the weights' decode does not use), and `global_scale` (NVFP4's per-tensor second
level: ModelOpt's `weight_scale_2`, a multiplier; compressed-tensors' `weight_global_scale`,
its reciprocal, `QuantScheme.global_inverse`).

Element formats of stored values: `uint4` / `uint8` (unsigned integer codes), `e4m3fn`
(float8 bytes), `e2m1` (FP4 nibbles), `float` (a float tensor's own value), `e8m0` (an
exponent byte, 2^(b - 127)), `index` (g_idx). The byte and nibble tables are
layoutc/runtime/numformats.py's.

Sources (read, not copied): vLLM 0.32.0 `model_executor/layers/quantization/`
`auto_gptq.py` (AutoGPTQConfig TYPE_MAP, AutoGPTQMoEMethod.create_weights),
`auto_awq.py` (AutoAWQMoEMethod.create_weights), `moe_wna16.py`
(MoeWNA16Method.get_weight_loader: convert_awq_tensor's reverse order [0, 4, 1, 5, 2, 6, 3, 7],
convert_gptq_int4_qzeros's `+ 1`), `fp8.py` (Fp8MoEMethod.create_weights: block scales
ceil-divided), `compressed_tensors/compressed_tensors_moe/compressed_tensors_moe_w8a8_fp8.py`,
`utils/quant_utils.py` (pack_quantized_values_into_int32, awq_pack's interleave
[0, 2, 4, 6, 1, 3, 5, 7]), `models/gpt_oss.py` (GptOssModel._load_weights_mxfp4);
transformers 5.19 `integrations/mxfp4.py` (_convert_moe_packed_tensors: low nibble first,
`ldexp(lut[code], scale - 127)`), `integrations/finegrained_fp8.py` (FP8Linear: scales
`ceil(out / block_n) x ceil(in / block_k)`, Fp8Dequantize multiplies by weight_scale_inv);
compressed-tensors 0.17 `quantization/lifecycle/initialize.py` (scale shapes per strategy).
"""

from __future__ import annotations

from dataclasses import dataclass

from layoutc.tools.checkpoints.checkpoint_format import CheckpointFormat
from layoutc.tools.checkpoints.errors import FormatError

AXES = ("out", "in")
ROLES = ("weight", "scale", "zero", "g_idx", "input_scale", "global_scale")
FLOAT_SCALES = (("float32", "float"), ("bfloat16", "float"), ("float16", "float"))
E8M0_SCALES = (("uint8", "e8m0"), ("float8_e8m0fnu", "e8m0"))
#: AutoAWQ's order inside an int32: slot i (bits 4i..4i+3) holds element ORDER[i] of 8.
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


@dataclass(frozen=True)
class Dim:
    """One stored dimension, from the logical extent of `axis` ("out", "in", or None: `size`).

    pack: values per storage element along it (the extent must be a multiple).
    split: the packed axis is stored as two dims `[extent / split, split / pack]` (MXFP4
    blocks of 32 values, 16 bytes each).
    group: 0 one entry per value; n > 0 one per n values, `ceil(extent / n)`; -1 one entry.
    exact: the extent must be a whole number of groups (AWQ, MXFP4).
    """

    axis: str | None
    pack: int = 1
    split: int = 0
    group: int = 0
    exact: bool = False
    size: int = 1

    def sizes(self, extents: dict[str, int], what: str) -> tuple[int, ...]:
        """The stored sizes this dim takes for `extents` (two when split). Raises FormatError
        LR154 when a packed extent is not whole elements, LR153 when an exact group is not whole."""
        if self.axis is None:
            return (self.size,)
        n = extents[self.axis]
        if self.pack > 1 or self.split:
            if n % self.pack or (self.split and n % self.split):
                unit = self.split or self.pack
                raise FormatError("LR154", f"{what}: its {self.axis} extent {n} is not a multiple of {unit} "
                                  f"({self.pack} values per stored element)")
            if self.split:
                return (n // self.split, self.split // self.pack)
            return (n // self.pack,)
        if self.group == -1:
            return (1,)
        if self.group > 0:
            if self.exact and n % self.group:
                raise FormatError("LR153", f"{what}: its {self.axis} extent {n} is not a whole number of "
                                  f"groups of {self.group}")
            return (-(-n // self.group),)
        return (n,)


@dataclass(frozen=True)
class Packing:
    """Integer codes packed into a wider storage element along one dim.

    bits: bits a value; storage_bits: bits a storage element (32: int32, 8: uint8).
    order: slot i (bits [i * bits, (i + 1) * bits)) holds element order[i] of each pack
    of `storage_bits // bits` consecutive values (identity: GPTQ, MXFP4 low nibble first;
    AWQ_ORDER: AutoAWQ GEMM).
    """

    bits: int
    storage_bits: int
    order: tuple[int, ...]

    @property
    def per_element(self) -> int:
        return self.storage_bits // self.bits


@dataclass(frozen=True)
class TensorSpec:
    """One stored tensor of a projection.

    suffix: appended to the projection's module name (".qweight"; gpt-oss: "_blocks").
    formats: (storage dtype, element format) pairs it may be stored as (torch dtype names).
    dims: stored dims, per expert (a fused checkpoint adds a leading experts dim).
    scalar: a per-tensor value, stored with shape () or (1,) (then dims is empty).
    required: False when the format allows the tensor to be absent (GPTQ g_idx without
    act-order, symmetric GPTQ's qzeros, which vLLM does not read).
    """

    role: str
    suffix: str
    formats: tuple[tuple[str, str], ...]
    dims: tuple[Dim, ...] = ()
    packing: Packing | None = None
    scalar: bool = False
    required: bool = True

    def dtypes(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.formats)

    def element(self, dtype: str) -> str:
        return dict(self.formats)[dtype]

    def shape(self, extents: dict[str, int], what: str = "") -> tuple[int, ...]:
        """The stored shape (per expert) for logical extents {"out": .., "in": ..}."""
        if self.scalar:
            return ()
        return tuple(s for d in self.dims for s in d.sizes(extents, what or self.suffix))


@dataclass(frozen=True)
class QuantScheme:
    """One quantized expert format (see the module docstring).

    name: layoutc's name ("gptq_int4", "gptq_int8", "awq_int4", "fp8_block", "fp8_channel",
    "fp8_tensor", "mxfp4"); method: config.json's `quant_method`.
    layout: "per_expert" (one module per expert and projection, names ending in ".weight" in
    bf16) or "fused" (gpt-oss: one tensor for all experts).
    group_size: along `in` (-1 whole axis, None not grouped); block: (out, in) scale block.
    zero: "none", "implicit" (`zero_point`, GPTQ symmetric: 8 or 128) or "stored" (a zero
    tensor, plus `zero_offset`: GPTQ's v1 checkpoint format stores z - 1).
    sym_qzero: for GPTQ symmetric, the value every qzeros slot holds when the checkpoint stores
    one (GPTQModel / AutoGPTQ pack the implicit zero: z - 1 in v1 "gptq", z in "gptq_v2"); any
    other value is an asymmetric checkpoint the config calls symmetric (LR166). None elsewhere.
    act_order: GPTQ desc_act (g_idx is then required and may permute groups).
    activation_scheme: FP8 "dynamic" or "static" (static adds `input_scale`), else None.
    global_inverse: the `global_scale` tensor holds the reciprocal of the multiplier
    (compressed-tensors' NVFP4 `weight_global_scale`; vLLM uses 1 / it).
    decode: the formula, in the contracts' terms; source: where each fact comes from.
    """

    name: str
    method: str
    bits: int
    layout: str
    tensors: tuple[TensorSpec, ...]
    decode: str
    source: str
    group_size: int | None = None
    block: tuple[int, int] | None = None
    zero: str = "none"
    zero_point: int = 0
    zero_offset: int = 0
    sym_qzero: int | None = None
    act_order: bool = False
    activation_scheme: str | None = None
    global_inverse: bool = False

    def spec(self, role: str) -> TensorSpec | None:
        return next((t for t in self.tensors if t.role == role), None)

    def weight(self) -> TensorSpec:
        spec = self.spec("weight")
        assert spec is not None, self.name
        return spec


def _int_formats(bits: int) -> tuple[tuple[str, str], ...]:
    return (("int32", f"uint{bits}"),)


_GPTQ_SRC = ("vLLM 0.32 auto_gptq.py AutoGPTQConfig (TYPE_MAP: 4 -> uint4b8, 8 -> uint8b128, pack_factor "
             "32 // bits), AutoGPTQMoEMethod.create_weights (qweight [K / pack, N] int32, scales [K / g, N], "
             "qzeros [K / g, N / pack]); moe_wna16.py convert_gptq_int4_qzeros (stored zero + 1); "
             "quant_utils.py pack_rows / pack_quantized_values_into_int32 (value i of a pack at bits 4i)")


def gptq(bits: int, group_size: int, *, sym: bool, act_order: bool, v2: bool = False) -> QuantScheme:
    """GPTQ (AutoGPTQ / GPTQModel) int4 or int8: qweight packed along K, K-first.

    g_idx[k] is the group of input channel k (k // group_size without act-order; a
    permutation's groups with it). Symmetric: the zero is implicit 2^(bits - 1) (vLLM's
    uint4b8 / uint8b128; qzeros is not read). Asymmetric: qzeros, packed along N, holds
    z - 1 in the v1 checkpoint format ("gptq") and z in "gptq_v2".
    """
    pack = Packing(bits, 32, tuple(range(32 // bits)))
    per = pack.per_element
    tensors = (
        TensorSpec("weight", ".qweight", _int_formats(bits), (Dim("in", pack=per), Dim("out")), pack),
        TensorSpec("zero", ".qzeros", _int_formats(bits), (Dim("in", group=group_size), Dim("out", pack=per)),
                   pack, required=not sym),
        TensorSpec("scale", ".scales", FLOAT_SCALES, (Dim("in", group=group_size), Dim("out"))),
        TensorSpec("g_idx", ".g_idx", (("int32", "index"), ("int64", "index")), (Dim("in"),),
                   required=act_order),
    )
    zp = 1 << (bits - 1)
    decode = (f"(code - {zp}) * scales[g_idx[k], n]" if sym else
              f"(code - (qzeros[g_idx[k], n]{'' if v2 else ' + 1'})) * scales[g_idx[k], n]")
    return QuantScheme(
        name=f"gptq_int{bits}", method="gptq", bits=bits, layout="per_expert", tensors=tensors, decode=decode,
        source=_GPTQ_SRC, group_size=group_size, zero="implicit" if sym else "stored", zero_point=zp if sym else 0,
        zero_offset=0 if (sym or v2) else 1, sym_qzero=(zp if v2 else zp - 1) if sym else None,
        act_order=act_order)


def awq(group_size: int) -> QuantScheme:
    """AWQ GEMM (AutoAWQ) int4: qweight [K, N / 8] packed along N in AWQ_ORDER, qzeros
    [K / g, N / 8] the same way, scales [K / g, N]; value = (q - z) * s. K must be whole
    groups (AutoAWQ's WQLinear_GEMM and vLLM's AutoAWQMoEMethod size scales K // g)."""
    pack = Packing(4, 32, AWQ_ORDER)
    tensors = (
        TensorSpec("weight", ".qweight", _int_formats(4), (Dim("in"), Dim("out", pack=8)), pack),
        TensorSpec("zero", ".qzeros", _int_formats(4), (Dim("in", group=group_size, exact=True),
                                                        Dim("out", pack=8)), pack),
        TensorSpec("scale", ".scales", FLOAT_SCALES, (Dim("in", group=group_size, exact=True), Dim("out"))),
    )
    return QuantScheme(
        name="awq_int4", method="awq", bits=4, layout="per_expert", tensors=tensors,
        decode="(code - qzeros[k // g, n]) * scales[k // g, n]", group_size=group_size, zero="stored",
        source="vLLM 0.32 auto_awq.py AutoAWQConfig (TYPE_MAP 4 only; w_bit/bits, q_group_size/group_size, "
        "zero_point), AutoAWQMoEMethod.create_weights (qweight [K, N / 8], scales [K // g, N], qzeros "
        "[K // g, N / 8]); quant_utils.py awq_pack (interleave 0, 2, 4, 6, 1, 3, 5, 7); moe_wna16.py "
        "convert_awq_tensor (reverse order 0, 4, 1, 5, 2, 6, 3, 7)")


def _input_scale(static: bool) -> tuple[TensorSpec, ...]:
    return (TensorSpec("input_scale", ".input_scale", FLOAT_SCALES, scalar=True),) if static else ()


def fp8(strategy: str, *, block: tuple[int, int] | None = None, scale_suffix: str = ".weight_scale_inv",
        method: str = "fp8", static: bool = False, e8m0_scales: bool = False) -> QuantScheme:
    """FP8 E4M3 weights [N, K] with float32 scales: per block (DeepSeek-V3 / MiniMax-M2:
    `weight_scale_inv` [ceil(N / bn), ceil(K / bk)], a multiplier despite its name), per output
    channel (compressed-tensors `weight_scale` [N, 1]) or per tensor (`weight_scale`, one value)."""
    scales = FLOAT_SCALES + (E8M0_SCALES if e8m0_scales else ())
    if strategy == "block":
        assert block is not None
        sdims: tuple[Dim, ...] = (Dim("out", group=block[0]), Dim("in", group=block[1]))
        scale = TensorSpec("scale", scale_suffix, scales, sdims)
        decode = f"e4m3fn(code) * {scale_suffix[1:]}[n // {block[0]}, k // {block[1]}]"
    elif strategy == "channel":
        scale = TensorSpec("scale", scale_suffix, scales, (Dim("out"), Dim("in", group=-1)))
        decode = f"e4m3fn(code) * {scale_suffix[1:]}[n, 0]"
    else:
        scale = TensorSpec("scale", scale_suffix, scales, scalar=True)
        decode = f"e4m3fn(code) * {scale_suffix[1:]}"
    weight = TensorSpec("weight", ".weight", (("float8_e4m3fn", "e4m3fn"),), (Dim("out"), Dim("in")))
    return QuantScheme(
        name=f"fp8_{strategy}", method=method, bits=8, layout="per_expert",
        tensors=(weight, scale, *_input_scale(static)), decode=decode, block=block,
        activation_scheme="static" if static else "dynamic",
        source="vLLM 0.32 fp8.py Fp8Config (weight_block_size, activation_scheme, ignored_layers / "
        "modules_to_not_convert), Fp8MoEMethod.create_weights (block scales ceil-divided; 'weight_scale "
        "for tensor, weight_scale_inv for block'); compressed_tensors_moe_w8a8_fp8.py (channel [N, 1], "
        "tensor, block); transformers 5.19 finegrained_fp8.py FP8Linear, Fp8Dequantize")


def mxfp4() -> QuantScheme:
    """gpt-oss MXFP4: `*_blocks` uint8 [E, out, in / 32, 16] (two e2m1 values a byte, low
    nibble first), `*_scales` uint8 [E, out, in / 32] E8M0 (one per 32 values of `in`);
    gate_up's rows interleave (gate, up) pairs as the bf16 checkpoint does; biases bf16."""
    pack = Packing(4, 8, (0, 1))
    tensors = (
        TensorSpec("weight", "_blocks", (("uint8", "e2m1"),), (Dim("out"), Dim("in", pack=2, split=32)), pack),
        TensorSpec("scale", "_scales", E8M0_SCALES, (Dim("out"), Dim("in", group=32, exact=True))),
    )
    return QuantScheme(
        name="mxfp4", method="mxfp4", bits=4, layout="fused", tensors=tensors, group_size=32,
        decode="e2m1(code) * e8m0(scales[n, k // 32])",
        source="transformers 5.19 integrations/mxfp4.py FP4_VALUES, _convert_moe_packed_tensors (blocks "
        "[E, out, G, 16], scales [E, out, G], low nibble = even element, ldexp(value, scale - 127), "
        "transpose to [E, in, out]); vLLM 0.32 models/gpt_oss.py _load_weights_mxfp4 (w13 rows 2I, "
        "scales per 32 of K); OCP MX v1.0 sections 5.3.3 (E2M1) and 5.4 (E8M0)")


#: ModelOpt and compressed-tensors NVFP4: block size along `in` (one E4M3 scale per 16 values).
NVFP4_GROUP = 16


def nvfp4(method: str = "modelopt", *, static_input: bool = True) -> QuantScheme:
    """NVFP4 per-expert projections, as ModelOpt and llm-compressor store them.

    weight uint8 [out, in / 2] (two E2M1 codes a byte, low nibble = even element), block
    scale float8_e4m3fn [out, in / 16] (in must be whole blocks), a float32 per-tensor global
    scale, and, for W4A4 (`static_input`), a float32 per-tensor activation scale.
    method "modelopt": `.weight`, `.weight_scale`, `.weight_scale_2` (a multiplier),
    `.input_scale`; "compressed-tensors" (nvfp4-pack-quantized): `.weight_packed`,
    `.weight_scale`, `.weight_global_scale` (the reciprocal: value = ... / global),
    `.input_global_scale`. Decode: e2m1(code) * e4m3fn(scale[n, k // 16]) * global
    (ModelOpt) or / global (compressed-tensors).
    """
    pack = Packing(4, 8, (0, 1))
    ct = method == "compressed-tensors"
    weight = TensorSpec("weight", ".weight_packed" if ct else ".weight", (("uint8", "e2m1"),),
                        (Dim("out"), Dim("in", pack=2)), pack)
    scale = TensorSpec("scale", ".weight_scale", (("float8_e4m3fn", "e4m3fn"),),
                       (Dim("out"), Dim("in", group=NVFP4_GROUP, exact=True)))
    glob = TensorSpec("global_scale", ".weight_global_scale" if ct else ".weight_scale_2",
                      (("float32", "float"),), scalar=True)
    inputs = (TensorSpec("input_scale", ".input_global_scale" if ct else ".input_scale", (("float32", "float"),),
                         scalar=True),) if static_input else ()
    g = glob.suffix[1:]
    return QuantScheme(
        name="nvfp4", method=method, bits=4, layout="per_expert", tensors=(weight, scale, glob, *inputs),
        group_size=NVFP4_GROUP, global_inverse=ct, activation_scheme="static" if static_input else None,
        decode=f"e2m1(code) * e4m3fn(weight_scale[n, k // 16]) {'/' if ct else '*'} {g}",
        source="vLLM 0.32 modelopt.py ModelOptNvFp4Config.from_config (quant_algo NVFP4 / W4A16_NVFP4, "
        "group_size 16, exclude_modules / ignore), ModelOptNvFp4FusedMoE.create_weights (w13_weight uint8 "
        "[E, 2I, H / 2], w13_weight_scale float8_e4m3fn [E, 2I, H / 16], w13_weight_scale_2 float32 [E, 2], "
        "w13_input_scale float32); compressed_tensors_moe_w4a4_nvfp4.py (weight_packed, weight_global_scale, "
        "process_weights_after_loading: w13_scale_2 = 1.0 / w13_weight_global_scale); "
        "utils/nvfp4_emulation_utils.py break_fp4_bytes (low nibble first); compressed-tensors 0.17 "
        "compressors/nvfp4/base.py NVFP4PackedCompressor")


def projection_extents(role: str, hidden: int, intermediate: int) -> dict[str, int]:
    """Logical {"out", "in"} of a projection: gate/up [I, H], down [H, I], fused gate_up [2I, H]."""
    if role in ("gate", "up"):
        return {"out": intermediate, "in": hidden}
    if role == "gate_up":
        return {"out": 2 * intermediate, "in": hidden}
    if role == "down":
        return {"out": hidden, "in": intermediate}
    raise ValueError(f"unknown projection {role!r}")


def tensor_names(scheme: QuantScheme, fmt: CheckpointFormat, layer: int,
                 expert: int | None = None) -> dict[str, dict[str, str]]:
    """Full names of the quantized tensors of `layer` (and `expert` for a per-expert
    layout), by projection ("gate", "up", "down" or "gate_up") then role.

    Raises FormatError LR158 when the scheme's layout does not fit the family's format
    (MXFP4 blocks are declared for fused experts, GPTQ/AWQ/FP8 for per-expert modules).
    """
    if (scheme.layout == "fused") != fmt.fused:
        have = "one fused tensor for all experts" if fmt.fused else "one module per expert"
        raise FormatError("LR158", f"{scheme.name} ({scheme.method}) is declared for "
                          f"{'fused' if scheme.layout == 'fused' else 'per-expert'} checkpoints; model_type "
                          f"{fmt.model_type!r} stores {have}")
    out: dict[str, dict[str, str]] = {}
    for proj, name in fmt.names(layer, expert).items():
        if proj.endswith("_bias"):
            continue
        if scheme.layout == "per_expert":
            if not name.endswith(".weight"):
                raise FormatError("LR158", f"{scheme.name}: {name} does not end in .weight; the quantized "
                                  "names replace it")
            module = name[: -len(".weight")]
        else:
            module = name
        out[proj] = {t.role: module + t.suffix for t in scheme.tensors}
    return out
