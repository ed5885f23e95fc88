"""Marlin MoE contracts (GPTQ int4, GPTQ int8, AWQ, FP8/MXFP8) against vLLM 0.32.

vLLM side, called directly:
- WNA16 admission: `oracle/int_wna16.py::_backend_incompatibility_reason(MARLIN, moe_config,
  AutoGPTQConfig | AutoAWQConfig, may_have_zp, may_have_bias, allow_tile_padding=True)`, the
  gate `select_wna16_moe_backend` applies (it calls `check_moe_marlin_supports_config`).
- padded size: `marlin_utils.py::marlin_moe_padded_intermediate(I_pp, group_size)`.
- WNA16 tensors: `_process_weights_marlin` / `_process_awq_weights_marlin` themselves, with
  the CUDA repack ops and the scale/zero/bias permutations patched to the identity, so
  what comes back is vLLM's padded tensor before the kernel's own re-layout.
- block-FP8 admission and allocation: vLLM's own `Fp8MoEMethod` (`quantization/fp8.py`) built
  for the layer with moe_backend="marlin": its `__init__` runs
  `oracle/fp8.py::resolve_fp8_moe_weight_block_shape` (`refine_fp8_moe_block_shape`,
  `pad_tp_shard_to_weight_blocks`) and `select_fp8_moe_backend` on the resolved block shape,
  and its `create_weights` runs `validate_fp8_block_shape_moe` and allocates the parameters
  (on the meta device), whose shapes are compared with layoutc's logical shapes;
- the block-FP8 TP path's loader: `RoutedExperts._load_model_weight_or_group_weight_scale`;
- FP8 tensors: `marlin_utils_fp8.py::prepare_fp8_moe_layer_for_marlin` itself, with the CUDA
  repack, the Marlin scale permutation and the exponent-bias rescale patched to the identity
  (what comes back is vLLM's padded weight and its per-column scales before the kernel's own
  re-layout), and `_moe_pad_shard_rows` / `_moe_pad_last` for MXFP8.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import contextlib
import itertools
import types
from collections.abc import Iterator
from unittest import mock

import pytest
import torch

from tests.support.conformance import oracle

pytestmark = pytest.mark.conformance

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


@pytest.mark.slow
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
    from vllm.model_executor.layers.quantization import fp8 as fp8_method
    from vllm.model_executor.layers.quantization.utils import marlin_utils_fp8
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_moe_padded_intermediate
    from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8Dynamic128Sym

    return types.SimpleNamespace(oracle=fp8_oracle, utils=marlin_utils_fp8, padded=marlin_moe_padded_intermediate,
                                 act_key=kFp8Dynamic128Sym, method=fp8_method)


@contextlib.contextmanager
def _marlin_world(tp: int) -> Iterator[None]:
    """Platform and world probes only: MarlinExperts._supports_current_device (CUDA with
    capability 7.5) answers True on this CPU host, and the TP world size that
    `Fp8MoEMethod.create_weights` and `validate_fp8_block_shape_moe` read is `tp`."""
    import vllm.distributed as dist
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExperts
    from vllm.model_executor.layers.quantization import fp8 as fp8_method

    with mock.patch.object(MarlinExperts, "_supports_current_device", staticmethod(lambda: True)), \
            mock.patch.object(dist, "get_tensor_model_parallel_world_size", return_value=tp), \
            mock.patch.object(fp8_method, "get_tensor_model_parallel_world_size", return_value=tp):
        yield


def _vllm_block_fp8_layer(fp8, config, num_experts: int = 8, marlin: bool = True):  # type: ignore[no-untyped-def]
    """(layer, method) with the parameters vLLM's `Fp8MoEMethod` allocates for a serialized
    block-FP8 [128, 128] checkpoint under the config's moe_backend (meta tensors: shapes
    only), or (None, the exception) when its `__init__` (block-shape resolution and backend
    selection) or `create_weights` (`validate_fp8_block_shape_moe`) refuses the layer.
    With `marlin`, a layer it builds must have chosen the Marlin backend."""
    quant = fp8.method.Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic",
                                 weight_block_size=[128, 128])
    layer = torch.nn.Module()
    layer.moe_config = config
    with _marlin_world(config.tp_size), torch.device("meta"):
        ok, method = oracle.call_or_reject(fp8.method.Fp8MoEMethod, quant, layer)
        if not ok:
            return None, method
        ok, exc = oracle.call_or_reject(method.create_weights, layer, num_experts, config.hidden_dim,
                                        config.intermediate_size_per_partition, torch.bfloat16, weight_loader=None)
    if not ok:
        return None, exc
    assert not marlin or method.fp8_backend == fp8.oracle.Fp8MoeBackend.MARLIN
    return layer, method


def _block_fp8_shapes(layer) -> dict[str, tuple[int, ...]]:  # type: ignore[no-untyped-def]
    """vLLM's parameter shapes under layoutc's tensor names (block scales are `*_weight_scale_inv`)."""
    return {"w13_weight": tuple(layer.w13_weight.shape), "w2_weight": tuple(layer.w2_weight.shape),
            "w13_weight_scale": tuple(layer.w13_weight_scale_inv.shape),
            "w2_weight_scale": tuple(layer.w2_weight_scale_inv.shape)}


def _vllm_fp8_marlin(fp8, config, scheme):  # type: ignore[no-untyped-def]
    """(admitted, allocated I_pp, padded I_pp, parameter shapes or None) as vLLM 0.32 computes
    them for --moe-backend marlin.

    Block FP8 is vLLM's `Fp8MoEMethod` itself (`_vllm_block_fp8_layer`): the TP shard may be
    padded to whole 128-blocks (pad_tp_shard_to_weight_blocks) or refined to a finer block
    that Marlin does not take, and create_weights refuses an I_pp that is not whole blocks.
    MXFP8 ([1, 32]) is a different dispatch (oracle/fp8.py: weight_block_size [1, 32] is
    MXFP8) with no block refinement. MarlinExperts has no shape gate (_supports_shape is the
    base class's True).
    """
    if scheme == "fp8_block128":
        layer, _ = _vllm_block_fp8_layer(fp8, config)
        if layer is None:
            return False, None, None, None
        i_pp = layer.w2_weight.shape[2]
        return True, i_pp, fp8.padded(i_pp, 128), _block_fp8_shapes(layer)
    i_pp = config.intermediate_size_per_partition
    return True, i_pp, fp8.padded(i_pp, 32), None


def _known_fp8(scheme: str, H: int, I: int, tp: int) -> str | None:
    i_pp = I // tp
    if H % 128:
        return "marlin_fp8_h_not_128"
    if scheme == "mxfp8" and i_pp % 32:
        return "mxfp8_ipp_not_32"
    return None


@pytest.mark.slow
def test_fp8_admission_and_padded_size_match_vllm(gen, fp8) -> None:  # type: ignore[no-untyped-def]
    module = gen["marlin_moe_fp8"]
    tally = oracle.Tally()
    for H, I, tp, scheme, act in itertools.product(HIDDEN, INTERMEDIATE, oracle.effective_tp_degrees(),
                                                   ("fp8_block128", "mxfp8"), ACTS):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, moe_backend="marlin")
        admitted, alloc, padded, shapes = _vllm_fp8_marlin(fp8, config, scheme) if ok else (False, None, None, None)
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
            if shapes is not None:  # vLLM's allocated parameters against layoutc's logical (per-rank) shapes
                tally.tensors += len(shapes)
                ours = {t: getattr(module, f"{t}_shapes")(plan)[0] for t in shapes}
                if ours != shapes:
                    tally.record("unexplained", f"{where}: shapes vllm {shapes} layoutc {ours}")
    print("marlin_moe_fp8:", tally.summary())
    assert tally.decisions > 5_000 and tally.sizes > 500 and tally.tensors > 4_000
    assert set(tally.disagreements) == {"marlin_fp8_h_not_128", "mxfp8_ipp_not_32"}, tally.summary()


# Block FP8 at tp=1 with I % 128 != 0, with the block refine_fp8_moe_block_shape offers
# ([g, g], g = gcd(128, I, H) when it is >= 32, which Marlin does not take) or None (the block
# stays [128, 128] and create_weights' validate_fp8_block_shape_moe refuses).
RAGGED = [(256, 192, [64, 64]), (2048, 320, [64, 64]), (128, 1000, None), (2048, 1408 + 64, [64, 64]),
          (256, 1440, [32, 32]), (7168, 1416, None)]


@pytest.mark.kernel
@pytest.mark.parametrize("H, I, refined", RAGGED)
def test_block_fp8_ragged_last_block_is_refused_by_vllm_and_by_layoutc(gen, fp8, H: int, I: int,
                                                                       refined: list[int] | None) -> None:
    """vLLM 0.32 never builds a block-FP8 Marlin MoE layer whose last 128-block is ragged.

    At tp=1 with I % 128 != 0, `refine_fp8_moe_block_shape` offers a finer [g, g] block when
    gcd(128, I, H) >= 32; `pad_tp_shard_to_weight_blocks` does nothing at tp=1, so
    `Fp8MoEMethod.__init__` asks Marlin for the refined key, which MarlinExperts does not
    support (ValueError from select_fp8_moe_backend). Otherwise the block stays [128, 128]
    and `create_weights` raises in `validate_fp8_block_shape_moe` ("not divisible by weight
    quantization block_n"). layoutc's contract refuses the same configurations (admit
    intermediate_size % 128 == 0 for block FP8)."""
    module = gen["marlin_moe_fp8"]

    def config(i: int, backend: str = "marlin"):  # type: ignore[no-untyped-def]
        return oracle.moe_config(hidden_size=H, intermediate_size=i, tp_size=1, moe_backend=backend)

    shape, refine = fp8.oracle.resolve_fp8_moe_weight_block_shape(config(I), [128, 128], fp8.act_key, True)
    assert (shape, refine) == ((refined, (128 // refined[0], 128 // refined[1])) if refined else ([128, 128], None))
    layer, exc = _vllm_block_fp8_layer(fp8, config(I))
    assert layer is None and isinstance(exc, ValueError)
    expected = "does not support the deployment configuration" if refined else "not divisible by weight quantization block_n"
    assert expected in str(exc), exc
    # --moe-backend auto never picks Marlin for it either: the refined key is not Marlin's
    # (here, with only Marlin's device probe true, the selection is Fp8MoeBackend.NONE), and
    # the [128, 128] block fails create_weights the same way
    auto_layer, auto = _vllm_block_fp8_layer(fp8, config(I, "auto"), marlin=False)
    assert auto_layer is None or auto.fp8_backend != fp8.oracle.Fp8MoeBackend.MARLIN
    assert oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=1,
                               scheme="fp8_block128", scale_dtype="float32", activation="silu") is None
    # the whole-block neighbour is served by both
    whole = I // 128 * 128 or 128
    ok_layer, _ = _vllm_block_fp8_layer(fp8, config(whole))
    assert ok_layer is not None
    assert oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=whole, tp_size=1,
                               scheme="fp8_block128", scale_dtype="float32", activation="silu") is not None


def _prepare_for_marlin(fp8, layer, w13, w2, s13, s2):  # type: ignore[no-untyped-def]
    """vLLM's `prepare_fp8_moe_layer_for_marlin` on CPU, the CUDA/kernel-format steps patched to
    the identity: `ops.gptq_marlin_repack` (returns the packed [K/4, N] int32 it is given),
    `marlin_permute_scales` (returns the [G, N] scales it is given) and
    `fp8_fused_exponent_bias_into_scales` (a power-of-two rescale for the kernel's dequant).
    What is left is vLLM's own padding, packing and block-to-column scale expansion."""
    ident = lambda t, *a, **k: t  # noqa: E731
    with mock.patch.object(fp8.utils.ops, "gptq_marlin_repack", lambda b_q_weight, **k: b_q_weight, create=True), \
            mock.patch.object(fp8.utils, "marlin_permute_scales", lambda s, **k: s), \
            mock.patch.object(fp8.utils, "fp8_fused_exponent_bias_into_scales", ident), \
            mock.patch.object(fp8.utils, "get_marlin_input_dtype", lambda *a, **k: None):
        return fp8.utils.prepare_fp8_moe_layer_for_marlin(layer, w13, w2, s13, s2)


def _marlin_layer(E: int, H: int, i_pp: int):  # type: ignore[no-untyped-def]
    """The attributes prepare_fp8_moe_layer_for_marlin reads (as Fp8MoEMethod.create_weights sets them)."""
    return types.SimpleNamespace(num_experts=E, hidden_size=H, intermediate_size_per_partition=i_pp,
                                 weight_block_size=[128, 128], orig_dtype=torch.float32)


def _fp8_bytes(*shape: int) -> torch.Tensor:
    """Random float8_e4m3fn codes that are finite (no 0x7F/0xFF NaN bytes)."""
    b = torch.randint(0, 256, shape, dtype=torch.uint8)
    b[(b & 0x7F) == 0x7F] = 0x3C
    return b.view(torch.float8_e4m3fn)


@pytest.mark.parametrize("H, I, tp", [(256, 256, 1), (384, 1536, 1), (256, 384, 2), (3072, 1536, 8)])
def test_block_fp8_tensors_match_prepare_fp8_moe_layer_for_marlin(gen, fp8, H: int, I: int, tp: int) -> None:
    """What the kernel receives for block FP8, before Marlin's own repack: vLLM's
    prepare_fp8_moe_layer_for_marlin packs each padded [N, K] weight to int32 ([K/4, N]) and
    expands the [128, 128] block scales to one per output column ([K/128, N]). layoutc's
    pad_w13_weight / pad_w2_weight give the same bytes, and its padded scales, read the way
    the contract states them (`groups(w13_weight.n, 128)`: output row n uses scale row n // 128;
    `groups(..k, 128)`: reduction column k uses scale column k // 128), the same per-column
    scales. tp > 1 is one rank's padded TP shard (its allocation from vLLM's Fp8MoEMethod)."""
    module = gen["marlin_moe_fp8"]
    E = 2
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, moe_backend="marlin")
    layer, exc = _vllm_block_fp8_layer(fp8, config, num_experts=E)
    assert layer is not None, exc
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, scheme="fp8_block128",
                       scale_dtype="float32", activation="silu")
    shapes = _block_fp8_shapes(layer)
    assert shapes == {t: getattr(module, f"{t}_shapes")(plan)[0] for t in shapes}
    torch.manual_seed(3)
    w13, w2 = _fp8_bytes(*shapes["w13_weight"]), _fp8_bytes(*shapes["w2_weight"])
    s13, s2 = torch.rand(shapes["w13_weight_scale"]) + 0.5, torch.rand(shapes["w2_weight_scale"]) + 0.5
    i_pp = shapes["w2_weight"][2]
    v13, v2, v13_s, v2_s = _prepare_for_marlin(fp8, _marlin_layer(E, H, i_pp), w13, w2, s13, s2)
    for v, ours in ((v13, module.pad_w13_weight(w13, plan)), (v2, module.pad_w2_weight(w2, plan))):
        packed = torch.stack([e.contiguous().view(torch.int32).T for e in ours])
        assert torch.equal(v, packed)
    for v_s, ours, (n, k) in ((v13_s, module.pad_w13_weight_scale(s13, plan), module.w13_weight_shapes(plan)[1][1:]),
                              (v2_s, module.pad_w2_weight_scale(s2, plan), module.w2_weight_shapes(plan)[1][1:])):
        per_column = ours[:, torch.arange(n) // 128][:, :, torch.arange(0, k, 128) // 128].transpose(1, 2)
        assert v_s.shape == per_column.shape and torch.equal(v_s, per_column)


@pytest.mark.parametrize("I", [192, 320, 1000, 1408 + 64])
def test_prepare_fp8_moe_layer_for_marlin_would_misplace_a_ragged_up_half(fp8, I: int) -> None:
    """Why layoutc does not state a ragged last block as vLLM's layout: vLLM never builds
    such a layer (test above), and its Marlin conversion would not serve one. Given the
    [E, 2 cdiv(I, 128), H/128] scales the cdiv formula in create_weights allocates,
    prepare_fp8_moe_layer_for_marlin expands the concatenated gate|up block rows by 128 and
    truncates to 2 I columns, so the up half's columns are shifted by 128 - I % 128: up row 0
    gets the gate half's last block scale. (This function is called here on a layer vLLM's own
    gates refuse; only its scale expansion is examined.)"""
    E, H = 1, 256
    G = -(-I // 128)
    s13 = torch.arange(1, 2 * G * (H // 128) + 1, dtype=torch.float32).view(E, 2 * G, H // 128)
    s2 = torch.ones(E, H // 128, G)
    w13, w2 = _fp8_bytes(E, 2 * I, H), _fp8_bytes(E, H, I)
    _, _, v13_s, _ = _prepare_for_marlin(fp8, _marlin_layer(E, H, I), w13, w2, s13, s2)
    P = fp8.padded(I, 128)
    up_row0 = v13_s[0, 0, P]  # column P of the padded [gate | up] output is up row 0
    assert up_row0 == s13[0, G - 1, 0] != s13[0, G, 0]  # the gate half's last block, not up block 0


@pytest.mark.parametrize("H, I, tp", [(3072, 1536, 8), (256, 640, 4), (256, 1152, 6), (256, 384, 2)])
def test_block_fp8_tp_shard_padding_matches_vllms_loader(gen, fp8, H: int, I: int, tp: int) -> None:
    """Block FP8 TP-shard padding at MiniMax-M2's numbers (H=3072, I=1536, tp=8) and three
    more: vLLM's resolve_fp8_moe_weight_block_shape pads each rank's I / tp shard to whole
    128-blocks (tp=8: 192 -> 256), and its grouped loader gives rank r the checkpoint columns
    [256 r, 256 r + 256) clipped to I, zero-filling the rest (ranks 6 and 7 hold only zeros).
    layoutc's `shard ... in blocks of block_k` gives every rank the same columns, with its
    fill (0) in the same places. The scales, loaded by the same function with is_scale=True
    into a parameter pre-filled with a sentinel, are unit scales (1.0) past a short rank's
    slice: layoutc's `tail fill 1` must give every rank's w2 and w13 scale shard bit for bit."""
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
    # scales: w2 [E, H/128, I/128] and w13 [E, 2 I/128, H/128] (gate blocks, then up), float32
    torch.manual_seed(I + tp)
    s2 = torch.rand(1, H // 128, I // 128) + 0.5
    s1, s3 = torch.rand(1, I // 128, H // 128) + 0.5, torch.rand(1, I // 128, H // 128) + 2.5
    s13 = torch.cat([s1, s3], 1)
    sentinel = -7.0
    short = 0
    for rank in range(tp):
        param2 = torch.full((H // 128, S // 128), sentinel)
        oracle.load_w2_grouped(config, param2, s2[0], rank, is_scale=True)
        param13 = torch.full((2 * S // 128, H // 128), sentinel)
        oracle.load_w13_grouped(config, param13, s1[0], s3[0], rank, is_scale=True)
        assert not (param2 == sentinel).any() and not (param13 == sentinel).any()  # vLLM wrote every entry
        ours2 = module.shard_w2_weight_scale(s2, rank, plan)
        ours13 = module.shard_w13_weight_scale(s13, rank, plan)
        assert ours2.shape == (1, *param2.shape) and ours13.shape == (1, *param13.shape)
        assert torch.equal(ours2[0].view(torch.int32), param2.view(torch.int32)), (rank, ours2[0], param2)
        assert torch.equal(ours13[0].view(torch.int32), param13.view(torch.int32)), (rank, ours13[0], param13)
        short += int((param2 == 1.0).any())
    if config.tp_shard_with_padding:
        assert short, "the case must have a short rank whose scale tail vLLM fills with 1"


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
