"""AITER (MXFP4 W4A16, W4A4, unquantized) and FlashInfer TRT-LLM (NVFP4, MXFP4) contracts
against vLLM 0.32's own functions, on this CPU host.

vLLM side, called directly:
- sizes: `oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size(backend, H, I_pp,
  activation)` under `oracle.rocm_platform()` (is_rocm patched True, a stub
  `vllm.platforms.rocm`); `oracle/unquantized.py::unquantized_round_up_hidden_size_and_intermediate_size`.
- admission: `AiterExperts.is_supported_config`, `TrtLlmNvFp4ExpertsModular.is_supported_config`,
  `TrtLlmMxfp4ExpertsMonolithic.is_supported_config`, each with `_supports_current_device` patched.
- kernel arguments: `experts/rocm_aiter_moe.py::rocm_aiter_fused_experts` itself, with
  `rocm_aiter_ops.fused_moe` replaced by a recorder (and a stub `aiter.ops.flydsl.moe_common`
  for its GateMode import): the hidden_pad / intermediate_pad it would hand AITER.
- tensors: vLLM's loader (`RoutedExperts._load_w13/_load_w2`) into a padded parameter, then
  `_zero_intermediate_padding` (unquantized AITER); `flashinfer_utils.py::align_fp4_moe_weights_for_fi`,
  `align_fp4_moe_hidden_dim_for_fi` and `flashinfer_fp4_moe.py::reorder_w1w3_to_w3w1` (NVFP4).
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import enum
import itertools
import sys
import types
from unittest import mock

import pytest
import torch

from tests.support.conformance import oracle

pytestmark = pytest.mark.conformance

HIDDEN = (64, 100, 128, 256, 2048, 2816, 2880, 3072, 4096, 7168)
INTERMEDIATE = (64, 88, 176, 192, 256, 360, 704, 768, 1408, 1536, 2048, 2880, 3072, 14336, 4 * 40320)


@pytest.fixture(scope="module")
def v():  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.experts import rocm_aiter_moe, trtllm_mxfp4_moe, trtllm_nvfp4_moe
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4, unquantized
    from vllm.model_executor.layers.quantization.utils import flashinfer_fp4_moe, flashinfer_utils
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    patches = [mock.patch.object(cls, "_supports_current_device", staticmethod(lambda: True))
               for cls in (rocm_aiter_moe.AiterExperts, trtllm_nvfp4_moe.TrtLlmNvFp4ExpertsModular,
                           trtllm_mxfp4_moe.TrtLlmMxfp4ExpertsMonolithic)]
    for p in patches:
        p.start()
    yield types.SimpleNamespace(mk=mk, aiter=rocm_aiter_moe, nv=trtllm_nvfp4_moe, mx=trtllm_mxfp4_moe, mxfp4=mxfp4,
                                unq=unquantized, fi=flashinfer_utils, fi4=flashinfer_fp4_moe, qu=qu,
                                std=mk.FusedMoEActivationFormat.Standard)
    for p in reversed(patches):
        p.stop()


def _supported(cls, config, wkey, akey, std) -> bool:  # type: ignore[no-untyped-def]
    ok, _ = cls.is_supported_config(cls, config, wkey, akey, std)
    return ok


# ---- AITER sizes and admission -------------------------------------------------------


AITER_ACTS = ("silu", "gelu", "swigluoai", "gelu_tanh")


@pytest.mark.slow
def test_aiter_mxfp4_sizes_and_admission_match_vllm(gen, v) -> None:  # type: ignore[no-untyped-def]
    """aiter_fused_moe (AITER_MXFP4_BF16) and aiter_mxfp4_w4a4_moe (AITER_MXFP4_MXFP4)."""
    backend = v.mxfp4.Mxfp4MoeBackend
    cases = {"aiter_fused_moe": (backend.AITER_MXFP4_BF16, None),
             "aiter_mxfp4_w4a4_moe": (backend.AITER_MXFP4_MXFP4, v.qu.kMxfp4Dynamic)}
    tally = oracle.Tally()
    with oracle.rocm_platform():
        for name, (be, akey) in cases.items():
            module = gen[name]
            for H, I, tp, act in itertools.product(HIDDEN, INTERMEDIATE, oracle.effective_tp_degrees(), AITER_ACTS):
                tally.decisions += 1
                ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                                   activation_name=act)
                admitted = ok and _supported(v.aiter.AiterExperts, config, v.qu.kMxfp4Static, akey, v.std)
                plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation=act)
                where = f"{name} H={H} I={I} tp={tp} act={act}"
                if admitted != (plan is not None):
                    if name == "aiter_mxfp4_w4a4_moe" and act == "swigluoai" and admitted:
                        key = "aiter_w4a4_gpt_oss_interleaved"  # refused: a view the contract cannot state
                    else:
                        key = oracle.mxfp4_admission_key(admitted, act, I, tp) if I % tp == 0 else "unexplained"
                    tally.record(key, f"{where}: vllm={admitted} layoutc={plan is not None}")
                    continue
                if not admitted:
                    continue
                callers = [("activation passed", oracle.activation(act), {})]
                if name == "aiter_fused_moe":  # GptOssMxfp4MoEMethod, Quark, online MXFP4 pass none
                    callers.append(("no activation", None, {"activation_passed": 0}))
                for caller, passed, extra in callers:
                    tally.sizes += 1
                    want = v.mxfp4.mxfp4_round_up_hidden_size_and_intermediate_size(be, H, I // tp, passed)
                    p = module.plan(num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp, activation=act,
                                    **extra) if extra else plan
                    got = (p.hidden_size_padded, p.intermediate_size_per_partition_padded)
                    if want != got:
                        if name == "aiter_mxfp4_w4a4_moe" and want[0] == got[0] and want[1] % 256:
                            key = "aiter_w4a4_128"
                        else:
                            key = "unexplained"
                        tally.record(key, f"{where} ({caller}): vllm {want} layoutc {got}")
    print("aiter mxfp4:", tally.summary())
    assert tally.decisions > 10_000 and tally.sizes > 5_000
    assert set(tally.disagreements) == {"aiter_w4a4_128", "mxfp4_ipp_not_32", "gpt_oss_mxfp4_i_not_32",
                                        "aiter_w4a4_gpt_oss_interleaved"}, tally.summary()


def test_aiter_silu_at_the_issue_numbers(gen, v) -> None:
    """H 7168, I 3072, tp 8, silu (DeepSeek-V4 / Kimi-K3 shape): vLLM (7168, 384), layoutc now too."""
    with oracle.rocm_platform():
        want = v.mxfp4.mxfp4_round_up_hidden_size_and_intermediate_size(
            v.mxfp4.Mxfp4MoeBackend.AITER_MXFP4_BF16, 7168, 384, oracle.activation("silu"))
    plan = gen["aiter_fused_moe"].plan(num_experts=256, hidden_size=7168, intermediate_size=3072, tp_size=8,
                                       activation="silu")
    assert want == (7168, 384) == (plan.hidden_size_padded, plan.intermediate_size_per_partition_padded)


def test_aiter_unquantized_sizes_and_admission_match_vllm(gen, v) -> None:  # type: ignore[no-untyped-def]
    module = gen["aiter_unquantized_moe"]
    be = v.unq.UnquantizedMoeBackend.AITER
    tally = oracle.Tally()
    for H, I, tp, act, dtype in itertools.product(HIDDEN, (*INTERMEDIATE, 1, 2, 130, 190, 193, 200, 224),
                                                  oracle.effective_tp_degrees(), AITER_ACTS, ("bfloat16", "float16")):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, dtype=oracle.DTYPES[dtype])
        admitted = ok and _supported(v.aiter.AiterExperts, config, None, None, v.std)
        plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp,
                                   activation=act, dtype=dtype)
        where = f"H={H} I={I} tp={tp} act={act}"
        if admitted != (plan is not None):
            tally.record("unexplained", f"{where}: vllm={admitted} layoutc={plan is not None}")
        elif admitted:
            tally.sizes += 1
            want = v.unq.unquantized_round_up_hidden_size_and_intermediate_size(be, H, I // tp)
            if want != (H, plan.intermediate_size_per_partition_padded):
                tally.record("unexplained", f"{where}: vllm {want} layoutc {plan.intermediate_size_per_partition_padded}")
    print("aiter unquantized:", tally.summary())
    assert tally.decisions > 10_000 and tally.sizes > 5_000
    assert not tally.disagreements, tally.summary()


# ---- AITER kernel arguments: rocm_aiter_fused_experts itself --------------------------


class _GateMode(enum.Enum):
    INTERLEAVE = "interleave"
    SEPARATED = "separated"


def _aiter_pads(v, config, hidden_padded: int, activation: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The hidden_pad / intermediate_pad rocm_aiter_fused_experts hands aiter.fused_moe."""
    stub = types.ModuleType("aiter.ops.flydsl.moe_common")
    stub.GateMode = _GateMode  # type: ignore[attr-defined]
    seen: dict[str, int] = {}

    def record(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.update(hidden_pad=kwargs["hidden_pad"], intermediate_pad=kwargs["intermediate_pad"])
        return torch.zeros(1)

    ops = v.aiter.rocm_aiter_ops
    with mock.patch.dict(sys.modules, {"aiter": types.ModuleType("aiter"), "aiter.ops": types.ModuleType("aiter.ops"),
                                       "aiter.ops.flydsl": types.ModuleType("aiter.ops.flydsl"),
                                       "aiter.ops.flydsl.moe_common": stub}), \
            mock.patch.object(ops, "fused_moe", record), \
            mock.patch.object(ops, "get_aiter_activation_type", lambda name: 7, create=True):
        v.aiter.rocm_aiter_fused_experts(torch.zeros(1, hidden_padded), None, None, torch.ones(1, 1),
                                         torch.zeros(1, 1, dtype=torch.int32), config,
                                         activation=oracle.activation(activation))
    return seen


@pytest.mark.parametrize("name", ["aiter_fused_moe", "aiter_mxfp4_w4a4_moe", "aiter_unquantized_moe"])
def test_aiter_kernel_args_match_rocm_aiter_fused_experts(gen, v, name) -> None:  # type: ignore[no-untyped-def]
    module = gen[name]
    n = 0
    for H, I, tp, act in itertools.product((100, 256, 2880, 4096, 7168), (88, 704, 1408, 2880, 3072, 14336),
                                           oracle.effective_tp_degrees(), ("silu", "gelu", "swigluoai")):
        extra = {"dtype": "bfloat16"} if name == "aiter_unquantized_moe" else {}
        plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp,
                                   activation=act, **extra)
        if plan is None:
            continue
        config = oracle.moe_config(hidden_size=H, intermediate_size=I, tp_size=tp, activation_name=act)
        hidden_padded = getattr(plan, "hidden_size_padded", H)
        # what RoutedExperts.__init__ does with maybe_roundup_sizes' answer
        config.hidden_dim = hidden_padded
        config.intermediate_size_per_partition = plan.intermediate_size_per_partition_padded
        want = _aiter_pads(v, config, hidden_padded, act)
        got = module.kernel_args(plan)
        assert got.get("hidden_pad", 0) == want["hidden_pad"], (H, I, tp, act, got, want)
        assert got["intermediate_pad"] == want["intermediate_pad"], (H, I, tp, act, got, want)
        n += 1
    print(f"{name}: {n} kernel-argument pairs compared")
    assert n > 300


# ---- AITER tensors ---------------------------------------------------------------------


@pytest.mark.parametrize("I, tp, H", [(704, 4, 64), (2880, 8, 128), (1792, 8, 64), (384, 2, 96)])
def test_aiter_unquantized_shard_and_zero_pad_match_vllm(gen, v, I, tp, H) -> None:  # type: ignore[no-untyped-def]
    """vLLM's loader into a torch.empty-like (NaN-filled) padded parameter, then
    _zero_intermediate_padding, against layoutc's shard_w13 / shard_w2, every rank."""
    module = gen["aiter_unquantized_moe"]
    E = 2
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, activation="silu", dtype="bfloat16")
    P = plan.intermediate_size_per_partition_padded
    w1, w3, w2 = torch.randn(E, I, H).bfloat16(), torch.randn(E, I, H).bfloat16(), torch.randn(E, H, I).bfloat16()
    for rank in range(tp):
        config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp)
        config.intermediate_size_per_partition = P
        w13_p = oracle.load_w13(config, torch.full((E, 2 * P, H), float("nan")).bfloat16(), w1, w3, rank)
        w2_p = oracle.load_w2(config, torch.full((E, H, P), float("nan")).bfloat16(), w2, rank)
        v.unq._zero_intermediate_padding(config, w13_p, w2_p)
        assert torch.equal(w13_p, module.shard_w13(torch.cat([w1, w3], 1), rank, plan))
        assert torch.equal(w2_p, module.shard_w2(w2, rank, plan))


@pytest.mark.parametrize("name, I, tp, H, act", [
    ("aiter_fused_moe", 3072, 8, 7168 // 8, "silu"),     # 384 -> 384 (silu: 128)
    ("aiter_fused_moe", 1536, 4, 200, "silu"),           # 384, H 200 -> 256
    ("aiter_fused_moe", 2048, 4, 200, "gelu"),           # 512 -> 512, H 200 -> 256
    ("aiter_mxfp4_w4a4_moe", 3072, 8, 256, "silu"),      # 384 -> 512 (vLLM allocates 384: aiter#5233)
])
def test_aiter_mxfp4_generic_loader_shard_matches_vllm(gen, v, name, I, tp, H, act) -> None:  # type: ignore[no-untyped-def]
    """Mxfp4MoEMethod checkpoints load through RoutedExperts._load_w13/_load_w2 into the padded
    (torch.zeros) parameter; layoutc's shard_w13/shard_w2 give the same tensors. Weights are
    stood in by bf16 values (the contract states them unpacked)."""
    module = gen[name]
    E = 2
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, activation=act)
    P, Hp = plan.intermediate_size_per_partition_padded, plan.hidden_size_padded
    w1, w3, w2 = torch.randn(E, I, H).bfloat16(), torch.randn(E, I, H).bfloat16(), torch.randn(E, H, I).bfloat16()
    for rank in range(tp):
        config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, activation_name=act)
        w13_p = oracle.load_w13(config, torch.zeros(E, 2 * P, Hp, dtype=torch.bfloat16), w1, w3, rank)
        w2_p = oracle.load_w2(config, torch.zeros(E, Hp, P, dtype=torch.bfloat16), w2, rank)
        assert torch.equal(w13_p, module.shard_w13(torch.cat([w1, w3], 1), rank, plan))
        assert torch.equal(w2_p, module.shard_w2(w2, rank, plan))


def _layoutc_w2_columns(module, plan, I: int, rank: int) -> list[int | None]:  # type: ignore[no-untyped-def]
    """What layoutc's shard_w2 puts in each padded column of `rank`'s w2: the checkpoint column
    index, or None where it holds the fill (indices + 1 carried exactly in bf16 as two tensors,
    (idx + 1) % 128 and (idx + 1) // 128; the fill is 0)."""
    idx = torch.arange(1, I + 1).view(1, 1, I).expand(1, 4, I)
    lo = module.shard_w2((idx % 128).bfloat16().contiguous(), rank, plan)[0, 0].long()
    hi = module.shard_w2((idx // 128).bfloat16().contiguous(), rank, plan)[0, 0].long()
    return [v - 1 if v else None for v in (hi * 128 + lo).tolist()]


def _trtllm_w2_columns(module, plan, I: int, rank: int) -> list[int | None]:  # type: ignore[no-untyped-def]
    """The same for the TRT-LLM MXFP4 contract, whose w2 is packed 2 values per byte along the
    intermediate dim: the E8M0 scale table (one byte per 32 columns) carries the block index."""
    H = plan.hidden_size
    blocks = torch.arange(1, I // 32 + 1, dtype=torch.uint8).view(1, 1, I // 32).expand(1, H, I // 32).contiguous()
    got = module.shard_w2_weight_scale(blocks, rank, plan)[0, 0].long().tolist()
    return [32 * (b - 1) + j if b else None for b in got for j in range(32)]


def _layoutc_w13_pairs(module, plan, I: int, rank: int) -> list[int | None]:  # type: ignore[no-untyped-def]
    """The checkpoint (gate, up) pair index in each row of the gate half of `rank`'s padded
    [gate | up] w13 (None: fill); the up half must hold the same pairs."""
    idx = torch.arange(1, I + 1).view(1, I, 1).expand(1, I, 4)
    full = torch.cat([idx, idx + I], 1)  # gate rows 1..I, up rows I+1..2I: the full [gate | up]
    lo = module.shard_w13((full % 128).bfloat16().contiguous(), rank, plan)[0, :, 0].long()
    hi = module.shard_w13((full // 128).bfloat16().contiguous(), rank, plan)[0, :, 0].long()
    values = [v - 1 if v else None for v in (hi * 128 + lo).tolist()]
    gate, up = values[: len(values) // 2], values[len(values) // 2:]
    assert up == [v + I if v is not None else None for v in gate]
    return gate


@pytest.mark.slow
@pytest.mark.parametrize("contract", ["aiter_fused_moe", "flashinfer_trtllm_mxfp4_moe"])
def test_gpt_oss_mxfp4_block_sharding_matches_vllms_loader(gen, contract: str) -> None:
    """gpt-oss (I=2880 = 90 blocks of 32): vLLM's own GptOssModel._load_weights_mxfp4, run on a
    stub model, against layoutc's shard_w2 and shard_w13 for every rank of every effective TP
    degree that divides I. vLLM gives each rank cdiv(90, tp) whole blocks (tp=8: 384 rows,
    rank 1 [384, 768), rank 7 [2688, 2880) = 192 rows) in the prefix of its I / tp-sized
    allocation, and the w2 bias to rank 0 only; so does the contract's `shard ... in blocks
    of 32` (docs/kernels.md 8.3)."""
    module = gen[contract]
    I = 2880
    checked = 0
    for tp in oracle.effective_tp_degrees():
        if I % tp:
            continue
        plan = module.plan(num_experts=1, hidden_size=4 if contract == "aiter_fused_moe" else 256,
                           intermediate_size=I, tp_size=tp, activation="swigluoai")
        padded = plan.intermediate_size_per_partition_padded
        for rank in range(tp):
            vllm_rank = oracle.gpt_oss_mxfp4_rank_rows(I, tp, rank)
            assert vllm_rank["w2_bias_kept"] == (rank == 0)
            values = vllm_rank["w2_values"]
            assert vllm_rank["w13_rows"] == [2 * c + j for c in values for j in (0, 1)]
            expected = [*values, *[None] * (padded - len(values))]
            if contract == "aiter_fused_moe":
                assert _layoutc_w2_columns(module, plan, I, rank) == expected, (contract, tp, rank)
                assert _layoutc_w13_pairs(module, plan, I, rank) == expected, (contract, tp, rank)
            else:
                assert _trtllm_w2_columns(module, plan, I, rank) == expected, (contract, tp, rank)
            dtype = torch.bfloat16 if contract == "aiter_fused_moe" else torch.float32
            bias = module.shard_w2_bias(torch.ones(module.w2_bias_full_shape(plan), dtype=dtype), rank, plan)
            assert bool(bias.abs().sum() > 0) == vllm_rank["w2_bias_kept"]
            checked += 1
    assert checked >= 200, checked
    tp8_rank7 = oracle.gpt_oss_mxfp4_rank_rows(I, 8, 7)["w2_values"]
    assert (tp8_rank7[0], len(tp8_rank7)) == (2688, 192)


def test_gpt_oss_mxfp4_loader_drops_rows_when_i_is_not_whole_blocks(gen) -> None:
    """The vLLM bug behind `gpt_oss_mxfp4_i_not_32`: at I = 88 (2.75 blocks of 32), tp = 1, the
    gpt-oss loader counts I // 32 = 2 blocks and gives the only rank columns [0, 64): checkpoint
    columns 64..87 are never loaded (their parameter columns stay zero). Both MXFP4 contracts
    refuse I % 32 != 0 for swigluoai."""
    got = oracle.gpt_oss_mxfp4_rank_rows(88, 1, 0)["w2_values"]
    assert got == list(range(64))
    for name in ("aiter_fused_moe", "flashinfer_trtllm_mxfp4_moe"):
        with pytest.raises(gen[name].LayoutContractError, match="multiple of 32"):
            gen[name].plan(num_experts=1, hidden_size=256, intermediate_size=88, tp_size=1, activation="swigluoai")


# ---- FlashInfer TRT-LLM NVFP4 -------------------------------------------------------------


def test_flashinfer_nvfp4_sizes_and_admission_match_vllm(gen, v) -> None:  # type: ignore[no-untyped-def]
    module = gen["flashinfer_nvfp4_moe"]
    cls = v.nv.TrtLlmNvFp4ExpertsModular
    tally = oracle.Tally()
    hidden = (*(h for h in HIDDEN if h % 16 == 0), 16, 48, 2688)
    for H, I, tp, act, dtype in itertools.product(hidden, INTERMEDIATE, oracle.effective_tp_degrees(),
                                                  ("silu", "gelu", "gelu_tanh", "swigluoai"), ("bfloat16", "float16")):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, dtype=oracle.DTYPES[dtype])
        admitted = ok and _supported(cls, config, v.qu.kNvfp4Static, v.qu.kNvfp4Dynamic, v.std)
        plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp,
                                   activation=act, dtype=dtype)
        where = f"H={H} I={I} tp={tp} act={act}"
        if admitted != (plan is not None):
            key = "nvfp4_ipp_not_16" if admitted and (I // tp) % 16 else "unexplained"
            tally.record(key, f"{where}: vllm={admitted} layoutc={plan is not None}")
            continue
        if admitted:
            tally.sizes += 1
            hidden_align = v.fi.trtllm_nvfp4_hidden_alignment(per_token_activation=False, is_act_and_mul=True)
            want = (-(-H // hidden_align) * hidden_align, -(-(I // tp) // 64) * 64)
            got = (plan.hidden_size_padded, plan.intermediate_size_per_partition_padded)
            if want != got:
                tally.record("unexplained", f"{where}: vllm {want} layoutc {got}")
    print("flashinfer_nvfp4_moe:", tally.summary())
    assert tally.decisions > 10_000 and tally.sizes > 2_000
    assert set(tally.disagreements) == {"nvfp4_ipp_not_16"}, tally.summary()


@pytest.mark.parametrize("H, i_pp", [(2816, 176), (64, 64), (200 - 8, 32), (256, 48)])
def test_flashinfer_nvfp4_pad_tensors_match_vllm(gen, v, H, i_pp) -> None:  # type: ignore[no-untyped-def]
    """reorder_w1w3_to_w3w1, align_fp4_moe_hidden_dim_for_fi(256), align_fp4_moe_weights_for_fi(64),
    in prepare_nvfp4_moe_layer_for_fi_or_cutlass's order, against layoutc's pad_* of the
    same [gate | up] checkpoint shard (layoutc states w13 as [up | gate] halves)."""
    module = gen["flashinfer_nvfp4_moe"]
    E = 2
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=i_pp, tp_size=1, activation="silu",
                       dtype="bfloat16")
    w13 = torch.randint(0, 256, (E, 2 * i_pp, H // 2), dtype=torch.uint8)   # [w1=gate | w3=up]
    s13 = torch.randn(E, 2 * i_pp, H // 16).to(torch.float8_e4m3fn)
    w2 = torch.randint(0, 256, (E, H, i_pp // 2), dtype=torch.uint8)
    s2 = torch.randn(E, H, i_pp // 16).to(torch.float8_e4m3fn)
    gate_up = w13.clone(), s13.clone()
    r13, rs13 = v.fi4.reorder_w1w3_to_w3w1(w13.clone(), s13.clone())
    r13, rs13, p2, ps2, _ = v.fi.align_fp4_moe_hidden_dim_for_fi(r13, rs13, w2, s2, min_alignment=256)
    p13, ps13, p2, ps2, padded = v.fi.align_fp4_moe_weights_for_fi(r13, rs13, p2, ps2, is_act_and_mul=True,
                                                                  min_alignment=64)
    assert padded == plan.intermediate_size_per_partition_padded
    up_gate = lambda t: torch.cat([t[:, i_pp:], t[:, :i_pp]], 1)  # noqa: E731  (the logical [up | gate] input)
    assert torch.equal(p13, module.pad_w13_weight(up_gate(gate_up[0]), plan))
    assert torch.equal(ps13.view(torch.uint8), module.pad_w13_weight_scale(up_gate(gate_up[1]), plan).view(torch.uint8))
    assert torch.equal(p2, module.pad_w2_weight(w2, plan))
    assert torch.equal(ps2.view(torch.uint8), module.pad_w2_weight_scale(s2, plan).view(torch.uint8))


def test_nvfp4_ipp_not_16_reproduction_with_vllms_loader() -> None:
    """gemma-4 NVFP4 (I=704) at tp=8: I_pp = 88, 88 % 16 = 8. vLLM's _load_w2 narrows the
    w2 block scales [H, 704/16 = 44] at (44 // 8) * rank = 5 * rank blocks, i.e. value
    80 * rank, while the rank's weights start at value 88 * rank: from rank 1 on, the
    scales do not line up with the weights."""
    I, tp, H = 704, 8, 16
    config = oracle.moe_config(num_experts=1, hidden_size=H, intermediate_size=I, tp_size=tp)
    blocks = torch.arange(I // 16, dtype=torch.float32).view(1, 1, I // 16).expand(1, H, I // 16).contiguous()
    starts = []
    for rank in range(tp):
        param = torch.full((1, H, (I // tp) // 16), -1.0)  # ModelOptNvFp4FusedMoE: I_pp // 16 scale columns
        oracle.load_w2(config, param, blocks, rank)
        starts.append(int(param[0, 0, 0]) * 16)  # first value the rank's scales cover
    weight_starts = [rank * (I // tp) for rank in range(tp)]
    assert starts[0] == weight_starts[0] == 0
    assert all(s != w for s, w in zip(starts[1:], weight_starts[1:], strict=True)), (starts, weight_starts)
    assert starts[1] == 80 and weight_starts[1] == 88


# ---- FlashInfer TRT-LLM MXFP4 ---------------------------------------------------------------


def test_flashinfer_trtllm_mxfp4_sizes_and_admission_match_vllm(gen, v) -> None:  # type: ignore[no-untyped-def]
    module = gen["flashinfer_trtllm_mxfp4_moe"]
    cls = v.mx.TrtLlmMxfp4ExpertsMonolithic
    be = v.mxfp4.Mxfp4MoeBackend.FLASHINFER_TRTLLM_MXFP4_BF16
    tally = oracle.Tally()
    for H, I, tp, act in itertools.product(HIDDEN, INTERMEDIATE, oracle.effective_tp_degrees(),
                                           ("silu", "swigluoai", "gelu")):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act)
        admitted = ok and _supported(cls, config, v.qu.kMxfp4Static, None, v.std)
        plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp, activation=act)
        oracle.compare_mxfp4_plan(tally, f"H={H} I={I} tp={tp} act={act}", admitted, plan, act, H, I, tp,
                                  v.mxfp4.mxfp4_round_up_hidden_size_and_intermediate_size, be)
    print("flashinfer_trtllm_mxfp4_moe:", tally.summary())
    assert tally.decisions > 4_000 and tally.sizes > 1_000
    # H = 100: vLLM's gate admits a hidden size no MXFP4 checkpoint has (known.py "no-checkpoint")
    assert set(tally.disagreements) == {"mxfp4_ipp_not_32", "gpt_oss_mxfp4_i_not_32", "mxfp4_hidden_not_32"}, \
        tally.summary()
