"""Marlin MoE contracts (GPTQ int4, GPTQ int8, AWQ, FP8/MXFP8) against vLLM 0.32.

vLLM side, called directly:
- WNA16 admission: `oracle/int_wna16.py::_backend_incompatibility_reason(MARLIN, moe_config,
  AutoGPTQConfig | AutoAWQConfig, may_have_zp, may_have_bias, allow_tile_padding=True)`, the
  gate `select_wna16_moe_backend` applies (it calls `check_moe_marlin_supports_config`).
- padded size: `marlin_utils.py::marlin_moe_padded_intermediate(I_pp, group_size)`.
- WNA16 tensors: `_process_weights_marlin` / `_process_awq_weights_marlin` themselves, with
  the CUDA repack ops and the scale/zero/bias permutations patched to the identity, so
  what comes back is vLLM's padded tensor before the kernel's own re-layout.
- FP8 admission and the block-FP8 TP path: `oracle/fp8.py::resolve_fp8_moe_weight_block_shape`
  (with moe_backend="marlin", which is where `pad_tp_shard_to_weight_blocks` runs);
  FP8 tensors: `marlin_utils_fp8.py::_moe_pad_shard_rows` / `_moe_pad_last`, called with
  the sizes `prepare_fp8_moe_layer_for_marlin` computes.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import itertools
import types
from unittest import mock

import pytest
import torch

from tests.conformance import oracle

HIDDEN = (64, 100, 128, 256, 2048, 2880, 3072, 4096, 7168)
INTERMEDIATE = (88, 128, 172, 176, 180, 192, 256, 704, 768, 1408, 1536, 2048, 2880, 3072, 14336, 4 * 40320)
ACTS = ("silu", "gelu", "gelu_tanh")


@pytest.fixture(scope="module")
def wna16():  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.fused_moe.oracle import int_wna16
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig
    from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_moe_padded_intermediate

    def gptq(bits: int, g: int) -> object:
        return AutoGPTQConfig(weight_bits=bits, group_size=g, desc_act=False, is_sym=True, lm_head_quantized=False,
                              dynamic={}, full_config={})

    def awq(g: int) -> object:
        return AutoAWQConfig(weight_bits=4, group_size=g, zero_point=True, lm_head_quantized=False)

    return types.SimpleNamespace(mod=int_wna16, gptq=gptq, awq=awq, padded=marlin_moe_padded_intermediate)


def _vllm_marlin_admits(w, config, quant_config, zp: bool) -> bool:  # type: ignore[no-untyped-def]
    reason = w.mod._backend_incompatibility_reason(w.mod.WNA16MoEBackend.MARLIN, config, quant_config,
                                                   zp, True, True)
    return reason is None


CASES = {
    # contract -> (quant config maker, group sizes swept, extra plan params, zero points)
    "marlin_moe_wna16": (lambda w, g: w.gptq(4, g), (-1, 32, 64, 128), {"act_order": False}, False),
    "marlin_moe_gptq_int8": (lambda w, g: w.gptq(8, g), (-1, 32, 64, 128), {}, False),
    "marlin_moe_awq": (lambda w, g: w.awq(g), (32, 64, 128), {}, True),
}


def _known_wna16(name: str, g: int, i_pp: int) -> str | None:
    """The pinned vLLM bugs: a channelwise shard that the packed checkpoint cannot be cut into."""
    if name == "marlin_moe_wna16" and g == -1 and i_pp % 8:
        return "gptq_int4_channelwise_ipp_not_8"
    if name == "marlin_moe_gptq_int8" and g == -1 and i_pp % 4:
        return "gptq_int8_ipp_not_4"
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_wna16_admission_and_padded_size_match_vllm(gen, wna16, name) -> None:  # type: ignore[no-untyped-def]
    make_quant, groups, extra, zp = CASES[name]
    module = gen[name]
    tally = oracle.Tally()
    for H, I, tp, g, act, dtype in itertools.product(HIDDEN, INTERMEDIATE, oracle.effective_tp_degrees(), groups,
                                                     ACTS, ("float16", "bfloat16")):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, dtype=oracle.DTYPES[dtype])
        admitted = ok and _vllm_marlin_admits(wna16, config, make_quant(wna16, g), zp)
        plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp,
                                   group_size=g, activation=act, dtype=dtype, **extra)
        where = f"H={H} I={I} tp={tp} g={g}"
        if admitted != (plan is not None):
            key = _known_wna16(name, g, I // tp) if admitted and ok else None
            tally.record(key or "unexplained", f"{where}: vllm={admitted} layoutc={plan is not None}")
            continue
        if admitted:
            tally.sizes += 1
            want = wna16.padded(config.intermediate_size_per_partition, g)
            if want != plan.intermediate_size_per_partition_padded:
                tally.record("unexplained", f"{where}: padded vllm={want} layoutc={plan.intermediate_size_per_partition_padded}")
    print(f"{name}:", tally.summary())
    assert tally.decisions > 20_000 and tally.sizes > 2_000
    assert "unexplained" not in tally.disagreements, tally.summary()
    pinned = {"marlin_moe_wna16": {"gptq_int4_channelwise_ipp_not_8"},
              "marlin_moe_gptq_int8": {"gptq_int8_ipp_not_4"}, "marlin_moe_awq": set()}[name]
    assert set(tally.disagreements) == pinned, tally.summary()


def _identity_ops(w):  # type: ignore[no-untyped-def]
    """Patch the CUDA repacks and the Marlin permutations to the identity (arguments unused)."""
    ident = lambda t, *a, **k: t  # noqa: E731
    return [
        mock.patch.object(w.mod.ops, "gptq_marlin_moe_repack", ident, create=True),
        mock.patch.object(w.mod.ops, "awq_marlin_moe_repack", ident, create=True),
        mock.patch.object(w.mod, "marlin_moe_permute_scales", lambda s, **k: s),
        mock.patch.object(w.mod, "moe_packed_to_marlin_zero_points", lambda z, **k: z),
        mock.patch.object(w.mod, "moe_awq_to_marlin_zero_points", lambda z, **k: z),
        mock.patch.object(w.mod, "marlin_permute_bias", lambda b: b),
    ]


def _rand_int32(*shape: int) -> torch.Tensor:
    return torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32)


@pytest.mark.parametrize("name, bits, g, H, i_pp", [
    ("marlin_moe_wna16", 4, 128, 256, 128 + 128),   # aligned to lcm(64,128): no pad
    ("marlin_moe_wna16", 4, 32, 256, 96),           # 96 -> 128
    ("marlin_moe_wna16", 4, -1, 128, 40),           # channelwise: 40 -> 64, w2 scales untouched
    ("marlin_moe_gptq_int8", 8, 64, 128, 192),      # 192 -> 192
    ("marlin_moe_gptq_int8", 8, 32, 256, 160),      # 160 -> 192
    ("marlin_moe_gptq_int8", 8, -1, 128, 36),       # 36 -> 64
])
def test_gptq_pad_tensors_match_process_weights_marlin(gen, wna16, name, bits, g, H, i_pp) -> None:  # type: ignore[no-untyped-def]
    module = gen[name]
    E, pf = 2, 32 // bits
    extra = {"act_order": False} if name == "marlin_moe_wna16" else {}
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=i_pp, tp_size=1, group_size=g,
                       activation="silu", dtype="float16", **extra)
    G13, G2 = (1, 1) if g == -1 else (H // g, i_pp // g)
    torch.manual_seed(1)
    # K-first, as layoutc (and AutoGPTQMoEMethod.create_weights) state them.
    w13_q, w2_q = _rand_int32(E, H // pf, 2 * i_pp), _rand_int32(E, i_pp // pf, H)
    w13_s, w2_s = torch.randn(E, G13, 2 * i_pp, dtype=torch.float16), torch.randn(E, G2, H, dtype=torch.float16)
    w13_z, w2_z = _rand_int32(E, G13, 2 * i_pp // pf), _rand_int32(E, G2, H // pf)
    w13_b, w2_b = torch.randn(E, 2 * i_pp, dtype=torch.float16), torch.randn(E, H, dtype=torch.float16)
    layer = types.SimpleNamespace(intermediate_size_per_partition=i_pp, num_groups_w13=G13, num_groups_w2=G2)
    patches = _identity_ops(wna16)
    for p in patches:
        p.start()
    try:
        # _process_weights_marlin takes canonical N-first tensors and transposes them itself.
        out = wna16.mod._process_weights_marlin(
            layer, None, bits, pf, g, w13_q.transpose(1, 2), w2_q.transpose(1, 2), w13_s.transpose(1, 2),
            w2_s.transpose(1, 2), w13_z.transpose(1, 2), w2_z.transpose(1, 2), w13_b, w2_b)
    finally:
        for p in reversed(patches):
            p.stop()
    v13_q, v2_q, v13_s, v2_s, v13_z, v2_z, _, _, v13_b, v2_b = out
    assert torch.equal(v13_q, module.pad_w13_qweight(w13_q, plan))
    assert torch.equal(v2_q, module.pad_w2_qweight(w2_q, plan))
    assert torch.equal(v13_s, module.pad_w13_scales(w13_s, plan))
    assert torch.equal(v2_s, module.pad_w2_scales(w2_s, plan))
    assert torch.equal(v13_z, module.pad_w13_qzeros(w13_z, plan))
    assert torch.equal(v2_z, module.pad_w2_qzeros(w2_z, plan))
    assert torch.equal(v13_b, module.pad_w13_bias(w13_b, plan))
    assert torch.equal(v2_b, module.pad_w2_bias(w2_b, plan))


@pytest.mark.parametrize("g, H, i_pp", [(128, 256, 128), (32, 256, 96), (64, 128, 40 + 24), (128, 384, 384 - 128)])
def test_awq_pad_tensors_match_process_awq_weights_marlin(gen, wna16, g, H, i_pp) -> None:  # type: ignore[no-untyped-def]
    module = gen["marlin_moe_awq"]
    E, pf = 2, 8
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=i_pp, tp_size=1, group_size=g,
                       activation="silu", dtype="bfloat16")
    torch.manual_seed(2)
    w13_q, w2_q = _rand_int32(E, H, 2 * i_pp // pf), _rand_int32(E, i_pp, H // pf)
    w13_s, w2_s = torch.randn(E, H // g, 2 * i_pp).bfloat16(), torch.randn(E, i_pp // g, H).bfloat16()
    w13_z, w2_z = _rand_int32(E, H // g, 2 * i_pp // pf), _rand_int32(E, i_pp // g, H // pf)
    layer = types.SimpleNamespace(intermediate_size_per_partition=i_pp, num_groups_w13=H // g, num_groups_w2=i_pp // g)
    patches = _identity_ops(wna16)
    for p in patches:
        p.start()
    try:
        out = wna16.mod._process_awq_weights_marlin(layer, 4, pf, g, None, w13_q, w2_q, w13_s, w2_s, w13_z, w2_z)
    finally:
        for p in reversed(patches):
            p.stop()
    v13_q, v2_q, v13_s, v2_s, v13_z, v2_z = out[:6]
    assert torch.equal(v13_q, module.pad_w13_qweight(w13_q, plan))
    assert torch.equal(v2_q, module.pad_w2_qweight(w2_q, plan))
    assert torch.equal(v13_s, module.pad_w13_scales(w13_s, plan))
    assert torch.equal(v2_s, module.pad_w2_scales(w2_s, plan))
    assert torch.equal(v13_z, module.pad_w13_qzeros(w13_z, plan))
    assert torch.equal(v2_z, module.pad_w2_qzeros(w2_z, plan))


# ---- FP8 / MXFP8 -------------------------------------------------------------------


@pytest.fixture(scope="module")
def fp8():  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.fused_moe.oracle import fp8 as fp8_oracle
    from vllm.model_executor.layers.quantization.utils import marlin_utils_fp8
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_moe_padded_intermediate
    from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8Dynamic128Sym

    return types.SimpleNamespace(oracle=fp8_oracle, utils=marlin_utils_fp8, padded=marlin_moe_padded_intermediate,
                                 act_key=kFp8Dynamic128Sym)


def _vllm_fp8_marlin(fp8, config, scheme):  # type: ignore[no-untyped-def]
    """(admitted, allocated I_pp, padded I_pp) as vLLM 0.32 computes them for --moe-backend marlin.

    Block FP8 goes through resolve_fp8_moe_weight_block_shape, which may pad the TP shard
    to whole 128-blocks (pad_tp_shard_to_weight_blocks) or raise; MXFP8 ([1, 32]) is a
    different dispatch (oracle/fp8.py: weight_block_size [1, 32] is MXFP8) with no block
    refinement. MarlinExperts has no shape gate (_supports_shape is the base class's True).
    """
    block = [128, 128] if scheme == "fp8_block128" else [1, 32]
    if scheme == "fp8_block128":
        ok, _ = oracle.call_or_reject(fp8.oracle.resolve_fp8_moe_weight_block_shape, config, block, fp8.act_key, True)
        if not ok:
            return False, None, None
    i_pp = config.intermediate_size_per_partition
    return True, i_pp, fp8.padded(i_pp, block[1])


def _known_fp8(scheme: str, H: int, I: int, tp: int) -> str | None:
    i_pp = I // tp
    if H % 128:
        return "marlin_fp8_h_not_128"
    if scheme == "fp8_block128" and i_pp % 128 and tp == 1:
        return "block_fp8_ragged_last_block"
    if scheme == "mxfp8" and i_pp % 32:
        return "mxfp8_ipp_not_32"
    return None


def test_fp8_admission_and_padded_size_match_vllm(gen, fp8) -> None:  # type: ignore[no-untyped-def]
    module = gen["marlin_moe_fp8"]
    tally = oracle.Tally()
    for H, I, tp, scheme, act in itertools.product(HIDDEN, INTERMEDIATE, oracle.effective_tp_degrees(),
                                                   ("fp8_block128", "mxfp8"), ACTS):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, moe_backend="marlin")
        admitted, alloc, padded = _vllm_fp8_marlin(fp8, config, scheme) if ok else (False, None, None)
        plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp, scheme=scheme,
                                   scale_dtype="float32" if scheme == "fp8_block128" else "uint8", activation=act)
        where = f"{scheme} H={H} I={I} tp={tp}"
        if admitted != (plan is not None):
            key = _known_fp8(scheme, H, I, tp) if admitted else None
            tally.record(key or "unexplained", f"{where}: vllm={admitted} (alloc {alloc}) layoutc={plan is not None}")
            continue
        if admitted:
            tally.sizes += 1
            if (alloc, padded) != (plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded):
                tally.record("unexplained", f"{where}: vllm ({alloc}, {padded}) layoutc "
                                            f"({plan.intermediate_size_per_partition}, {plan.intermediate_size_per_partition_padded})")
    print("marlin_moe_fp8:", tally.summary())
    assert tally.decisions > 5_000 and tally.sizes > 500
    assert set(tally.disagreements) == {"marlin_fp8_h_not_128", "block_fp8_ragged_last_block",
                                        "mxfp8_ipp_not_32"}, tally.summary()


@pytest.mark.parametrize("H, I, tp", [(3072, 1536, 8), (256, 640, 4), (256, 1152, 6), (256, 384, 2)])
def test_block_fp8_tp_shard_padding_matches_vllms_loader(gen, fp8, H: int, I: int, tp: int) -> None:
    """Block FP8 TP-shard padding at MiniMax-M2's numbers (H=3072, I=1536, tp=8) and three
    more: vLLM's resolve_fp8_moe_weight_block_shape pads each rank's I / tp shard to whole
    128-blocks (tp=8: 192 -> 256), and its grouped loader gives rank r the checkpoint columns
    [256 r, 256 r + 256) clipped to I, zero-filling the rest (ranks 6 and 7 hold only zeros).
    layoutc's `shard ... in blocks of block_k` gives every rank the same columns, with its
    fill (0) in the same places."""
    module = gen["marlin_moe_fp8"]
    config = oracle.moe_config(hidden_size=H, intermediate_size=I, tp_size=tp, moe_backend="marlin")
    shape, refine = fp8.oracle.resolve_fp8_moe_weight_block_shape(config, [128, 128], fp8.act_key, True)
    assert (shape, refine) == ([128, 128], None)
    assert config.tp_shard_with_padding == ((I // tp) % 128 != 0)
    plan = module.plan(num_experts=1, hidden_size=H, intermediate_size=I, tp_size=tp, scheme="fp8_block128",
                       scale_dtype="float32", activation="silu")
    assert plan.intermediate_size_per_partition == config.intermediate_size_per_partition
    S = config.intermediate_size_per_partition
    # w2 [E, H, I] whose values are 1 + their checkpoint column: for vLLM's loader in float32,
    # for layoutc's shard_w2_weight in float8_e4m3fn as three base-16 digits (0..15 are exact)
    idx = (torch.arange(I) + 1).view(1, 1, I).expand(1, H, I).contiguous()
    digits = [(idx // 16 ** d % 16).to(torch.float8_e4m3fn) for d in range(3)]
    for rank in range(tp):
        param = torch.full((H, S), -1.0)
        oracle.load_w2_grouped(config, param, idx[0].float(), rank)
        vllm_cols = [int(v) - 1 if v > 0 else None for v in param[0].tolist()]
        assert all(v is not None or param[0, j] == 0 for j, v in enumerate(vllm_cols))
        ours = sum(module.shard_w2_weight(d, rank, plan)[0, 0].float().long() * 16 ** k for k, d in enumerate(digits))
        layoutc_cols = [int(v) - 1 if v > 0 else None for v in ours.tolist()]
        assert layoutc_cols[:S] == vllm_cols, (rank, layoutc_cols[:8], vllm_cols[:8])
        assert all(v is None for v in layoutc_cols[S:])
    if (H, I, tp) == (3072, 1536, 8):
        assert S == 256 and vllm_cols == [None] * 256  # rank 7 holds nothing


@pytest.mark.parametrize("scheme, H, i_pp", [("fp8_block128", 256, 128), ("mxfp8", 128, 96), ("mxfp8", 256, 160)])
def test_fp8_pad_tensors_match_vllm(gen, fp8, scheme, H, i_pp) -> None:  # type: ignore[no-untyped-def]
    module = gen["marlin_moe_fp8"]
    E = 2
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=i_pp, tp_size=1, scheme=scheme,
                       scale_dtype="float32" if scheme == "fp8_block128" else "uint8", activation="silu")
    P = plan.intermediate_size_per_partition_padded
    w13 = torch.randn(E, 2 * i_pp, H).to(torch.float8_e4m3fn)
    w2 = torch.randn(E, H, i_pp).to(torch.float8_e4m3fn)
    v13 = fp8.utils._moe_pad_shard_rows(w13, i_pp, P)
    v2 = fp8.utils._moe_pad_last(w2, i_pp, P)
    assert torch.equal(v13.view(torch.uint8), module.pad_w13_weight(w13, plan).view(torch.uint8))
    assert torch.equal(v2.view(torch.uint8), module.pad_w2_weight(w2, plan).view(torch.uint8))
    if scheme == "mxfp8":  # E8M0 scales [E, 2 I_pp, H/32] pad per half like the weights
        s13 = torch.randint(0, 255, (E, 2 * i_pp, H // 32), dtype=torch.uint8)
        assert torch.equal(fp8.utils._moe_pad_shard_rows(s13, i_pp, P), module.pad_w13_weight_scale(s13, plan))
