"""vllm_cpu_grouped_gemm (every activation, swigluoai included) against vLLM 0.32's CPU unquantized experts.

vLLM side (vllm/model_executor/layers/fused_moe/experts/cpu_moe.py), called directly:
- admission: `<Class>.is_supported_config(cls, moe_config, None, None, Standard)` for
  CPUUnquantizedExperts (vec), X86CPUUnquantizedExperts (amx),
  ArmCPUUnquantizedExperts (neon), PowerCPUUnquantizedExperts (vsx). Patched:
  `_supports_current_device` (asks for AMX tiles / an Arm or Power host) and the
  zentorch probe `is_zentorch_moe_config_supported` (False: the grouped-GEMM gate).
- padded size: `<Class>._padded_intermediate_size(moe_config)`.
- tensors: `_pad_moe_intermediate(layer)` on a stub layer, after vLLM's own loader
  (`RoutedExperts._load_w13/_load_w2`) sharded the checkpoint; compared bit for bit
  with layoutc's `shard_w13/shard_w2/shard_w13_bias`.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import itertools
import random
from unittest import mock

import pytest
import torch

from tests.support.conformance import oracle
from tests.support.conformance.known import KNOWN

pytestmark = pytest.mark.conformance

ISAS = ("vec", "amx", "neon", "vsx")
# relu2 (non-gated) is refused by both; FusedMoEConfig itself refuses it on CPU (the zentorch sweep has it).
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swigluoai")
HIDDEN = (1, 4, 16, 30, 32, 64, 100, 2816, 2880, 7168)
INTERMEDIATE = (1, 4, 30, 32, 44, 64, 88, 176, 192, 352, 360, 704, 1536, 2880, 3072, 14336)


@pytest.fixture(scope="module")
def cpu():  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    classes = {"vec": cpu_moe.CPUUnquantizedExperts, "amx": cpu_moe.X86CPUUnquantizedExperts,
               "neon": cpu_moe.ArmCPUUnquantizedExperts, "vsx": cpu_moe.PowerCPUUnquantizedExperts}
    patches = [mock.patch.object(cpu_moe, "is_zentorch_moe_config_supported", return_value=False)]
    patches += [mock.patch.object(cls, "_supports_current_device", staticmethod(lambda: True)) for cls in classes.values()]
    for p in patches:
        p.start()
    yield cpu_moe, classes, mk.FusedMoEActivationFormat.Standard
    for p in reversed(patches):
        p.stop()


def _layoutc(gen, isa, activation, dtype, H, I, tp):  # type: ignore[no-untyped-def]
    constants = dict(swiglu_alpha_milli=1702, swiglu_limit_milli=7000) if activation == "swigluoai" else {}
    return oracle.plan_or_none(gen["vllm_cpu_grouped_gemm"], num_experts=8, hidden_size=H, intermediate_size=I,
                               tp_size=tp, isa=isa, activation=activation, dtype=dtype, **constants)


def test_effective_tp_degrees_are_in_every_contract(gen) -> None:  # type: ignore[no-untyped-def]
    """Every contract's tp_size domain holds every degree vLLM's flatten_tp_across_dp_and_pcp
    forms (tp in {1, 2, 4, 8}, dp in 1..8, pcp in {1, 2}) and nothing else."""
    degrees = oracle.effective_tp_degrees()
    assert degrees == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128)
    assert "tp_degrees_outside_domain" not in KNOWN
    outside = (9, 11, 36, 192, 256)  # no tp x dp x pcp above forms these
    vllm_side = {name: module for name, module in gen.items() if not name.startswith("sglang_")}
    assert len(vllm_side) >= 18  # SGLang's contracts take SGLang's degrees 1-16 (tests/conformance/test_sglang.py)
    for name, module in vllm_side.items():
        for tp in degrees:
            try:
                module.plan(**{**_any_params(name), "tp_size": tp})
            except module.LayoutContractError as exc:
                assert "tp_size" not in str(exc) or "not one of" not in str(exc), (name, tp, str(exc))
        for tp in outside:
            with pytest.raises(module.LayoutContractError, match="not one of"):
                module.plan(**{**_any_params(name), "tp_size": tp})


def _any_params(name: str) -> dict[str, object]:
    """A well-formed configuration of each contract (tp varies; I = 4 * 40320 = 2**9 * 3**2 * 5 * 7 splits over every degree)."""
    base: dict[str, object] = dict(num_experts=8, hidden_size=4096, intermediate_size=40320 * 4)
    extra = {
        "vllm_cpu_grouped_gemm": dict(isa="vec", activation="silu", dtype="bfloat16"),
        "zentorch_fused_moe": dict(activation="silu", dtype="bfloat16"),
        "torch_grouped_mm": dict(activation="silu", dtype="bfloat16"),
        "torch_int4pack_moe": dict(group_size=32, activation="silu", dtype="bfloat16"),
        "torch_int4pack_gptq_moe": dict(group_size=32, activation="silu", dtype="bfloat16"),
        "torch_int8pack_moe": dict(activation="silu", dtype="bfloat16"),
        "torch_int8pack_gptq_moe": dict(group_size=-1, activation="silu", dtype="bfloat16"),
        "marlin_moe_wna16": dict(group_size=128, act_order=False, activation="silu", dtype="bfloat16"),
        "marlin_moe_fp8": dict(scheme="fp8_block128", scale_dtype="float32", activation="silu"),
        "marlin_moe_ct_fp8": dict(scheme="fp8_block128", scale_dtype="float32", activation="silu"),
        "marlin_moe_ct_mxfp4": dict(activation="silu"),
        "vllm_ct_wna16_int4_moe": dict(group_size=-1, activation="silu", dtype="bfloat16"),
        "vllm_ct_wna16_int8_moe": dict(group_size=-1, activation="silu", dtype="bfloat16"),
        "aiter_fused_moe": dict(activation="silu"),
        "aiter_unquantized_moe": dict(activation="silu", dtype="bfloat16"),
        "aiter_mxfp4_w4a4_moe": dict(activation="silu"),
        "flashinfer_nvfp4_moe": dict(activation="silu", dtype="bfloat16"),
        "flashinfer_trtllm_mxfp4_moe": dict(activation="swigluoai"),
        "marlin_moe_awq": dict(group_size=128, activation="silu", dtype="bfloat16"),
        "marlin_moe_gptq_int8": dict(group_size=128, activation="silu", dtype="bfloat16"),
        "vllm_cpu_w4a8_int4_moe": dict(group_size=32, activation="silu", scale_dtype="bfloat16"),
        "vllm_cpu_int8_moe": dict(isa="neon", activation="silu", dtype="bfloat16"),
        "vllm_cpu_int8_padded_moe": dict(activation="silu", dtype="bfloat16"),
        "flashinfer_trtllm_mxfp8_moe": dict(activation="silu"),
        "flashinfer_fp8_moe": dict(activation="silu"),
        "vllm_zen_cpu_int8_moe": dict(activation="silu", dtype="bfloat16"),
        "vllm_zen_cpu_int8_swigluoai_moe": dict(activation="swigluoai", dtype="bfloat16",
                                                swiglu_alpha_milli=1702, swiglu_limit_milli=7000),
        "vllm_cpu_mxfp4_moe": dict(),
        "vllm_cpu_mxfp4_gpt_oss_moe": dict(),
    }
    assert name in extra, f"add {name} to _any_params"
    return {**base, **extra[name]}


@pytest.mark.slow
def test_cpu_admission_and_padded_size_match_vllm(gen, cpu) -> None:  # type: ignore[no-untyped-def]
    _, classes, standard = cpu
    tally = oracle.Tally()
    rng = random.Random(15)
    extra_h = [rng.randrange(1, 8193) for _ in range(3)]
    extra_i = [rng.randrange(1, 20000) for _ in range(4)]
    tps = oracle.effective_tp_degrees()
    for H, I, tp, act, dtype in itertools.product(HIDDEN + tuple(extra_h), INTERMEDIATE + tuple(extra_i), tps,
                                                  ACTIVATIONS, ("bfloat16", "float16", "float32")):
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, dtype=oracle.DTYPES[dtype])
        for isa, cls in classes.items():
            tally.decisions += 1
            if ok:
                admitted, _ = cls.is_supported_config(cls, config, None, None, standard)
            else:
                admitted = False
            plan = _layoutc(gen, isa, act, dtype, H, I, tp)
            where = f"isa={isa} act={act} dtype={dtype} H={H} I={I} tp={tp}"
            if admitted != (plan is not None):
                # vLLM keeps swigluoai unpadded and refuses an unaligned shard; layoutc pads the
                # interleaved pairs at the end (proved, and run on the real kernel)
                extends = act == "swigluoai" and plan is not None and not admitted and \
                    plan.intermediate_size_per_partition_padded != plan.intermediate_size_per_partition
                tally.record("cpu_swigluoai_padded_pairs" if extends else "unexplained",
                             f"{where}: vllm admits={admitted}, layoutc admits={plan is not None}")
                continue
            if admitted:
                tally.sizes += 1
                if cls._padded_intermediate_size(config) != plan.intermediate_size_per_partition_padded:
                    tally.record("unexplained", f"{where}: padded vllm={cls._padded_intermediate_size(config)} "
                                                f"layoutc={plan.intermediate_size_per_partition_padded}")
    print("vllm_cpu_grouped_gemm:", tally.summary())
    assert tally.decisions > 100_000 and tally.sizes > 10_000  # 299,520 and 18,043
    assert set(tally.disagreements) == {"cpu_swigluoai_padded_pairs"}, tally.summary()


@pytest.mark.parametrize("isa, act, dtype, H, I, tp", [
    ("vec", "gelu_tanh", "bfloat16", 64, 704, 4),      # gemma-4 shape class: 176 -> 192
    ("vec", "silu", "float32", 32, 88, 2),             # 44 -> 64
    ("amx", "silu", "bfloat16", 64, 360, 8),           # 45 -> 64
    ("vsx", "gelu", "bfloat16", 32, 120, 3),           # 40 -> 48
    ("neon", "silu", "bfloat16", 64, 192, 1),          # aligned: no pad
])
def test_cpu_pad_and_shard_tensors_match_vllm(gen, cpu, isa, act, dtype, H, I, tp) -> None:  # type: ignore[no-untyped-def]
    """vLLM's loader then vLLM's _pad_moe_intermediate, against layoutc's shard_*, bit for bit, every rank."""
    _, classes, _ = cpu
    module = gen["vllm_cpu_grouped_gemm"]
    E = 3
    torch.manual_seed(0)
    td = oracle.DTYPES[dtype]
    w1, w3 = torch.randn(E, I, H).to(td), torch.randn(E, I, H).to(td)
    w2 = torch.randn(E, H, I).to(td)
    bias = torch.randn(E, 2 * I).to(td)  # [gate | up] over the whole I
    full_w13 = torch.cat([w1, w3], dim=1)
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, activation_name=act,
                               dtype=td, has_bias=True)
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, isa=isa, activation=act, dtype=dtype)
    i_pp = I // tp
    experts = object.__new__(classes[isa])
    experts.moe_config = config  # what _pad_moe_intermediate reads from self
    for rank in range(tp):
        layer = torch.nn.Module()
        w13_p = oracle.load_w13(config, torch.zeros(E, 2 * i_pp, H, dtype=td), w1, w3, rank)
        w2_p = oracle.load_w2(config, torch.zeros(E, H, i_pp, dtype=td), w2, rank)
        b = torch.zeros(E, 2 * i_pp, dtype=td)
        b[:, :i_pp] = bias[:, rank * i_pp:(rank + 1) * i_pp]          # w1 bias shard, as _load_w13 places it
        b[:, i_pp:] = bias[:, I + rank * i_pp:I + (rank + 1) * i_pp]  # w3 bias shard
        layer.w13_weight = torch.nn.Parameter(w13_p, requires_grad=False)
        layer.w2_weight = torch.nn.Parameter(w2_p, requires_grad=False)
        layer.w13_bias = torch.nn.Parameter(b, requires_grad=False)
        experts._pad_moe_intermediate(layer)
        assert torch.equal(layer.w13_weight.data, module.shard_w13(full_w13, rank, plan))
        assert torch.equal(layer.w2_weight.data, module.shard_w2(w2, rank, plan))
        assert torch.equal(layer.w13_bias.data, module.shard_w13_bias(bias, rank, plan))
        assert torch.equal(layer.w13_weight.data, module.pad_w13(w13_p, plan))


def test_known_list_is_documented() -> None:
    from tests.conformance.conftest import ROOT

    text = (ROOT / "docs" / "kernels.md").read_text()
    for key, (kind, heading) in KNOWN.items():
        assert kind in ("vllm-bug", "limitation", "no-checkpoint", "layoutc-extends")
        assert heading in text, f"docs/kernels.md lacks the section for known disagreement {key!r}: {heading!r}"


def test_every_known_disagreement_is_pinned_by_a_sweep() -> None:
    """Each key of the known list is asserted, as an exact expected set, by some sweep."""
    from pathlib import Path

    sources = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    for key in KNOWN:
        assert f'"{key}"' in sources, f"no sweep pins known disagreement {key!r}"
