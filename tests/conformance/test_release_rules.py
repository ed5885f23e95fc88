"""The rules vLLM 0.33 changed, held to each release's own functions (issue 42 item 1).

Runs in every process of the lane: in the kernel environment (vLLM 0.32.0) and in the
children tests/conformance/test_releases.py starts for 0.33.0 and 0.34.0 (conftest.RELEASE).
Each test asserts what the release it runs against does, from `RULES` (read from the wheels:
both rules arrive in 0.33.0 and 0.34.0 keeps them unchanged):

- CPU int8 W8A8 on AMX (`experts/cpu_moe.py CPUExpertsInt8`): 0.32 pads nothing and refuses
  I_pp % 32 != 0 (contracts/vllm_cpu_int8_moe.moe, isa amx); 0.33+ inherits
  `_CPUPaddedIntermediateMixin`: weights zero-padded per gate/up half to 32, the w13
  per-channel scales padded with ONES (contracts/vllm_cpu_int8_padded_moe.moe).
- FlashInfer TRT-LLM MXFP8 (`quantization/utils/flashinfer_utils.py prepare_fp8_moe_layer_for_fi`):
  0.32 swaps and shuffles the weights unpadded; 0.33+ calls
  `align_mxfp8_moe_weights_for_fi_trtllm` (intermediate per half to 128, hidden to 256, weights
  zero, UE8M0 scales 127) before `swap_w13_to_w31` (contracts/flashinfer_trtllm_mxfp8_moe.moe).

Tensors are compared byte for byte with the generated module's shard/pad functions written
into poisoned destinations (`out=` pre-filled with bytes that are no fill), so a pad the
generated code left unwritten shows; and each comparison is shown sensitive: the engine's
tensor with its pad rows poisoned must no longer compare equal.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import itertools
import types
from typing import Any
from unittest import mock

import pytest
import torch

from tests.conformance.conftest import RELEASE
from tests.support.conformance import oracle

pytestmark = pytest.mark.conformance

#: Which rule each release follows: (int8 AMX pads to 32 with unit scales, MXFP8 TRT-LLM pads 128/256).
RULES = {"0.32.0": (False, False), "0.33.0": (True, True), "0.34.0": (True, True)}


def _rules() -> tuple[bool, bool]:
    assert RELEASE in RULES, f"vLLM {RELEASE}: no rule recorded in tests/conformance/test_release_rules.py RULES"
    return RULES[RELEASE]


def _rows(a: torch.Tensor, b: torch.Tensor) -> list[tuple[int, int]]:
    """(expert, row) pairs where two same-shaped tensors differ in any byte (first 8)."""
    if a.shape != b.shape:
        return [(-1, -1)]
    x, y = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    bad = (x != y).reshape(x.shape[0], x.shape[1], -1).any(-1).nonzero().tolist()
    return [tuple(r) for r in bad[:8]]  # type: ignore[misc]


def _same(engine: torch.Tensor, ours: torch.Tensor, what: str) -> None:
    assert engine.shape == ours.shape, f"vLLM {RELEASE} {what}: shape {tuple(engine.shape)} != {tuple(ours.shape)}"
    assert engine.dtype.itemsize == ours.dtype.itemsize, what
    rows = _rows(engine, ours)
    assert not rows, f"vLLM {RELEASE} {what} differs from the contract at (expert, row) {rows}"


def _poisoned(shape: tuple[int, ...], dtype: torch.dtype, byte: int) -> torch.Tensor:
    return (
        torch.full(shape, byte, dtype=torch.uint8).view(dtype)
        if dtype.itemsize == 1
        else torch.full(shape, float(byte) + 0.5, dtype=dtype)
    )


def _sensitive(
    engine: torch.Tensor, ours: torch.Tensor, pad_rows: list[int], pad_cols: list[int], fill: int, what: str
) -> None:
    """The engine's pad rows (dim 1) and columns (dim 2) hold `fill` exactly, and poisoning
    them makes the comparison fail: the byte comparison covers the pad."""
    assert pad_rows or pad_cols, f"{what}: nothing padded in this configuration"
    fill_t = (
        torch.tensor(fill, dtype=engine.dtype)
        if engine.dtype.itemsize != 1
        else torch.tensor(fill, dtype=torch.uint8).view(engine.dtype)
    )
    want = fill_t.reshape(1).view(torch.uint8)
    pads = [engine[:, pad_rows]] if pad_rows else []
    pads += [engine[:, :, pad_cols]] if pad_cols else []
    for pad in pads:
        got = pad.contiguous().view(torch.uint8).reshape(-1, want.numel())
        assert torch.all(got == want.reshape(1, -1)), f"vLLM {RELEASE} {what}: a pad byte is not the fill {fill}"
    bad = engine.clone()
    poison = _poisoned((1,), engine.dtype, 0xA5)
    if pad_rows:
        bad[:, pad_rows] = poison
    else:
        bad[:, :, pad_cols] = poison
    assert _rows(bad, ours), f"{what}: poisoned pad compares equal: the check cannot see the pad"


# ---- CPU int8 W8A8, AMX (CPUExpertsInt8) ---------------------------------------------------------

HIDDEN = (30, 32, 64, 100, 2048, 2880, 7168)
INTERMEDIATE = (30, 45, 64, 88, 96, 192, 360, 704, 1536, 2880, 14336)


@pytest.fixture(scope="module")
def int8():  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    cls = cpu_moe.CPUExpertsInt8
    others = {"neon": cpu_moe.ArmCPUExpertsInt8, "vsx": cpu_moe.PowerCPUExpertsInt8}
    patches = [
        mock.patch.object(c, "_supports_current_device", staticmethod(lambda: True)) for c in (cls, *others.values())
    ]
    for p in patches:
        p.start()
    yield types.SimpleNamespace(
        cls=cls,
        others=others,
        keys=(qu.kInt8StaticChannelSym, qu.kInt8DynamicTokenSym),
        std=mk.FusedMoEActivationFormat.Standard,
    )
    for p in reversed(patches):
        p.stop()


@pytest.mark.slow
def test_int8_amx_admission_and_padded_size_per_release(gen, int8) -> None:  # type: ignore[no-untyped-def]
    """CPUExpertsInt8.is_supported_config (and, from 0.33, _padded_intermediate_size) against
    vllm_cpu_int8_padded_moe (0.33+) or vllm_cpu_int8_moe isa=amx (0.32), over every degree."""
    pads, _ = _rules()
    assert hasattr(int8.cls, "_pad_moe_intermediate") == pads, f"vLLM {RELEASE}: CPUExpertsInt8 padding changed"
    tally = oracle.Tally()
    for H, I, tp, act, dtype in itertools.product(
        HIDDEN,
        INTERMEDIATE,
        oracle.effective_tp_degrees(),
        ("silu", "gelu", "gelu_tanh", "swigluoai"),
        ("bfloat16", "float16", "float32"),
    ):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(
            oracle.moe_config,
            hidden_size=H,
            intermediate_size=I,
            tp_size=tp,
            activation_name=act,
            dtype=oracle.DTYPES[dtype],
        )
        admitted = ok and int8.cls.is_supported_config(int8.cls, config, *int8.keys, int8.std)[0]
        params = dict(num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp, activation=act, dtype=dtype)
        plan = (
            oracle.plan_or_none(gen["vllm_cpu_int8_padded_moe"], **params)
            if pads
            else oracle.plan_or_none(gen["vllm_cpu_int8_moe"], isa="amx", **params)
        )
        where = f"H={H} I={I} tp={tp} act={act} dtype={dtype}"
        if admitted != (plan is not None):
            tally.record("unexplained", f"{where}: vllm {RELEASE} admits={admitted} layoutc={plan is not None}")
        elif admitted:
            tally.sizes += 1
            want = int8.cls._padded_intermediate_size(config) if pads else config.intermediate_size_per_partition
            if want != plan.intermediate_size_per_partition_padded:
                tally.record(
                    "unexplained", f"{where}: padded vllm={want} layoutc={plan.intermediate_size_per_partition_padded}"
                )
    print(f"CPUExpertsInt8 (vLLM {RELEASE}):", tally.summary())
    assert tally.decisions > 20_000 and tally.sizes > 500  # 0.32: 22,176 and 570
    assert not tally.disagreements, tally.summary()


@pytest.mark.slow
def test_int8_arm_and_power_keep_the_unpadded_rule(gen, int8) -> None:  # type: ignore[no-untyped-def]
    """ArmCPUExpertsInt8 (neon) and PowerCPUExpertsInt8 (vsx) pad nothing in every release:
    their is_supported_config against vllm_cpu_int8_moe's, over every degree (so the neon and
    vsx `models` lines may name 0.33.0 and 0.34.0 while the amx one names 0.32.0 alone)."""
    tally = oracle.Tally()
    for H, I, tp, act, dtype in itertools.product(
        HIDDEN,
        INTERMEDIATE,
        oracle.effective_tp_degrees(),
        ("silu", "gelu", "gelu_tanh", "swigluoai"),
        ("bfloat16", "float16", "float32"),
    ):
        ok, config = oracle.call_or_reject(
            oracle.moe_config,
            hidden_size=H,
            intermediate_size=I,
            tp_size=tp,
            activation_name=act,
            dtype=oracle.DTYPES[dtype],
        )
        for isa, cls in int8.others.items():
            tally.decisions += 1
            assert not hasattr(cls, "_pad_moe_intermediate"), f"vLLM {RELEASE}: {cls.__name__} pads"
            admitted = ok and cls.is_supported_config(cls, config, *int8.keys, int8.std)[0]
            plan = oracle.plan_or_none(
                gen["vllm_cpu_int8_moe"],
                num_experts=8,
                hidden_size=H,
                intermediate_size=I,
                tp_size=tp,
                isa=isa,
                activation=act,
                dtype=dtype,
            )
            if admitted != (plan is not None):
                tally.record(
                    "unexplained",
                    f"isa={isa} H={H} I={I} tp={tp} act={act} dtype={dtype}: "
                    f"vllm {RELEASE} admits={admitted} layoutc={plan is not None}",
                )
            elif admitted:
                tally.sizes += 1
    print(f"Arm/PowerCPUExpertsInt8 (vLLM {RELEASE}):", tally.summary())
    assert tally.decisions > 40_000 and tally.sizes > 1_000
    assert not tally.disagreements, tally.summary()


@pytest.mark.parametrize("H, I, tp", [(64, 88, 1), (32, 360, 4), (128, 2880, 6), (64, 192, 3), (96, 1536, 8)])
def test_int8_amx_pad_tensors_per_release(gen, int8, H, I, tp) -> None:  # type: ignore[no-untyped-def]
    """vLLM's loader (RoutedExperts._load_w13/_load_w2/_load_per_channel_weight_scale), then
    the release's own CPUExpertsInt8._pad_moe_intermediate on the layer, against
    vllm_cpu_int8_padded_moe's shard_* written into poisoned memory, byte for byte, every rank.
    0.32 has no such method and refuses the unaligned shards (I_pp = 88, 90, 480 % 32 != 0)."""
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    pads, _ = _rules()
    E, i_pp = 2, I // tp
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, has_bias=True)
    if not pads:
        assert not hasattr(int8.cls, "_pad_moe_intermediate")
        refused = not int8.cls.is_supported_config(int8.cls, config, *int8.keys, int8.std)[0]
        assert refused == (i_pp % 32 != 0), f"vLLM {RELEASE}: CPUExpertsInt8 admission changed at I_pp={i_pp}"
        return
    module = gen["vllm_cpu_int8_padded_moe"]
    plan = module.plan(
        num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, activation="silu", dtype="bfloat16"
    )
    P = plan.intermediate_size_per_partition_padded
    assert int8.cls._padded_intermediate_size(config) == P
    torch.manual_seed(I + tp)
    w1, w3 = (torch.randint(-128, 128, (E, I, H), dtype=torch.int8) for _ in range(2))
    w2 = torch.randint(-128, 128, (E, H, I), dtype=torch.int8)
    s1, s3, s2 = torch.rand(E, I, 1) + 0.5, torch.rand(E, I, 1) + 0.5, torch.rand(E, H, 1) + 0.5
    bias = torch.randn(E, 2 * I).to(torch.bfloat16)
    fake: Any = types.SimpleNamespace(
        moe_config=config,
        _get_hidden_dim=RoutedExperts._get_hidden_dim,
        _narrow_expert_data_for_padding=RoutedExperts._narrow_expert_data_for_padding,
    )
    fake._load_w13 = lambda **kw: RoutedExperts._load_w13(fake, **kw)
    experts = object.__new__(int8.cls)
    experts.moe_config = config  # what _pad_moe_intermediate reads from self
    for rank in range(tp):
        layer = torch.nn.Module()
        w13_p = oracle.load_w13(config, torch.zeros(E, 2 * i_pp, H, dtype=torch.int8), w1, w3, rank)
        w2_p = oracle.load_w2(config, torch.zeros(E, H, i_pp, dtype=torch.int8), w2, rank)
        s13_p, s2_p = torch.zeros(E, 2 * i_pp, 1), torch.zeros(E, H, 1)
        for e in range(E):
            for shard_id, src in (("w1", s1), ("w3", s3)):
                RoutedExperts._load_per_channel_weight_scale(
                    fake, expert_data=s13_p[e], shard_dim=0, shard_id=shard_id, loaded_weight=src[e], tp_rank=rank
                )
            RoutedExperts._load_per_channel_weight_scale(
                fake, expert_data=s2_p[e], shard_dim=1, shard_id="w2", loaded_weight=s2[e], tp_rank=rank
            )
        b = torch.cat([bias[:, rank * i_pp : (rank + 1) * i_pp], bias[:, I + rank * i_pp : I + (rank + 1) * i_pp]], 1)
        for name, t in (
            ("w13_weight", w13_p),
            ("w2_weight", w2_p),
            ("w13_weight_scale", s13_p),
            ("w2_weight_scale", s2_p),
            ("w13_bias", b),
        ):
            setattr(layer, name, torch.nn.Parameter(t, requires_grad=False))
        experts._pad_moe_intermediate(layer)
        ours = {
            "w13_weight": module.shard_w13_weight(
                torch.cat([w1, w3], 1), rank, plan, out=_poisoned((E, 2 * P, H), torch.int8, 0x5A)
            ),
            "w2_weight": module.shard_w2_weight(w2, rank, plan, out=_poisoned((E, H, P), torch.int8, 0x5A)),
            "w13_weight_scale": module.shard_w13_weight_scale(
                torch.cat([s1, s3], 1), rank, plan, out=_poisoned((E, 2 * P, 1), torch.float32, 7)
            ),
            "w2_weight_scale": module.shard_w2_weight_scale(s2, rank, plan, out=_poisoned((E, H, 1), torch.float32, 7)),
            "w13_bias": module.shard_w13_bias(bias, rank, plan, out=_poisoned((E, 2 * P), torch.bfloat16, 7)),
        }
        for name, t in ours.items():
            _same(getattr(layer, name).data, t, f"{name} rank {rank}")
        if i_pp != P:
            rows = [*range(i_pp, P), *range(P + i_pp, 2 * P)]
            _sensitive(layer.w13_weight.data, ours["w13_weight"], rows, [], 0, "w13_weight")
            _sensitive(layer.w13_weight_scale.data, ours["w13_weight_scale"], rows, [], 1, "w13_weight_scale (ones)")
            _sensitive(layer.w2_weight.data, ours["w2_weight"], [], list(range(i_pp, P)), 0, "w2_weight")


# ---- FlashInfer TRT-LLM MXFP8 (prepare_fp8_moe_layer_for_fi) --------------------------------------


def _fi_layer(E: int, H: int, i_pp: int) -> Any:
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    moe_config = types.SimpleNamespace(is_act_and_mul=True, intermediate_size_per_partition=i_pp, hidden_dim=H)
    return types.SimpleNamespace(moe_config=moe_config, weight_block_size=[1, 32], activation=MoEActivation.SILU)


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("H, i_pp", [(2880, 96), (7168, 256), (64, 32), (256, 128), (4096, 160)])
def test_mxfp8_trtllm_alignment_per_release(gen, H, i_pp, flat) -> None:  # type: ignore[no-untyped-def]
    """The release's own prepare_fp8_moe_layer_for_fi(is_trtllm=True) on MXFP8 (uint8 UE8M0
    scales, weight_block_size [1, 32]), stopped before _shuffle_mxfp8_moe_weights (the kernel's
    tile shuffle: patched to hand back what it is given), against flashinfer_trtllm_mxfp8_moe's
    pad_* of the same [gate | up] shard written into poisoned memory, byte for byte; scales 3D
    and flattened [E, rows * cols] (the function keeps either layout). 0.32 pads nothing."""
    from vllm.model_executor.layers.quantization.utils import flashinfer_utils as fi

    _, pads = _rules()
    assert hasattr(fi, "align_mxfp8_moe_weights_for_fi_trtllm") == pads, f"vLLM {RELEASE}: MXFP8 alignment changed"
    E = 2
    torch.manual_seed(H + i_pp)
    w13 = torch.randint(0, 256, (E, 2 * i_pp, H), dtype=torch.uint8).view(torch.float8_e4m3fn)  # [gate | up]
    w2 = torch.randint(0, 256, (E, H, i_pp), dtype=torch.uint8).view(torch.float8_e4m3fn)
    s13 = torch.randint(100, 140, (E, 2 * i_pp, H // 32), dtype=torch.uint8)
    s2 = torch.randint(100, 140, (E, H, i_pp // 32), dtype=torch.uint8)
    layer = _fi_layer(E, H, i_pp)
    keep = lambda a, b, c, d, gated: (a, b, c, d)  # noqa: E731  (the tile shuffle, a permutation the kernel inverts)
    with mock.patch.object(fi, "_shuffle_mxfp8_moe_weights", side_effect=keep):
        f13 = s13.reshape(E, -1) if flat else s13
        f2 = s2.reshape(E, -1) if flat else s2
        p13, p2, ps13, ps2 = fi.prepare_fp8_moe_layer_for_fi(
            layer, w13.clone(), w2.clone(), f13.clone(), None, f2.clone(), None, is_trtllm=True
        )
    assert ps13.ndim == f13.ndim and ps2.ndim == f2.ndim, "the scale layout is kept"
    if not pads:  # vLLM 0.32: swap to [up | gate] and shuffle, unpadded
        assert p13.shape == w13.shape and p2.shape == w2.shape and layer.moe_config.hidden_dim == H
        return
    module = gen["flashinfer_trtllm_mxfp8_moe"]
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=i_pp, tp_size=1, activation="silu")
    P, Hp = plan.intermediate_size_per_partition_padded, plan.hidden_size_padded
    assert (layer.moe_config.intermediate_size_per_partition, layer.moe_config.hidden_dim) == (P, Hp)
    up_gate = lambda t: torch.cat([t[:, i_pp:], t[:, :i_pp]], 1)  # noqa: E731  (the contract's logical [up | gate])
    ours13 = module.pad_w13_weight(up_gate(w13), plan, out=_poisoned((E, 2 * P, Hp), torch.float8_e4m3fn, 0x7F))
    ours2 = module.pad_w2_weight(w2, plan, out=_poisoned((E, Hp, P), torch.float8_e4m3fn, 0x7F))
    ourss13 = module.pad_w13_weight_scale(up_gate(s13), plan, out=_poisoned((E, 2 * P, Hp // 32), torch.uint8, 0xFF))
    ourss2 = module.pad_w2_weight_scale(s2, plan, out=_poisoned((E, Hp, P // 32), torch.uint8, 0xFF))
    ps13_3d, ps2_3d = ps13.reshape(ourss13.shape), ps2.reshape(ourss2.shape)
    _same(p13, ours13, "w13_weight")
    _same(p2, ours2, "w2_weight")
    _same(ps13_3d, ourss13, "w13_weight_scale")
    _same(ps2_3d, ourss2, "w2_weight_scale")
    rows = [*range(i_pp, P), *range(P + i_pp, 2 * P)]
    if rows:
        _sensitive(p13, ours13, rows, [], 0, "w13_weight")
        _sensitive(ps13_3d, ourss13, rows, [], 127, "w13_weight_scale (UE8M0 127)")
    if Hp != H:
        _sensitive(p2, ours2, list(range(H, Hp)), [], 0, "w2_weight (hidden rows)")
        _sensitive(ps2_3d, ourss2, list(range(H, Hp)), [], 127, "w2_weight_scale (hidden rows, 127)")
        _sensitive(p13, ours13, [], list(range(H, Hp)), 0, "w13_weight (hidden columns)")
    if i_pp != P:
        _sensitive(p2, ours2, [], list(range(i_pp, P)), 0, "w2_weight (intermediate columns)")
