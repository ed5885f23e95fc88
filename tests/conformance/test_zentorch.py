"""zentorch_fused_moe against vLLM 0.32's zentorch gates.

vLLM side, called directly: `model_executor/kernels/linear/zentorch_utils.py::
is_zentorch_moe_config_supported(moe_config)` (the config gate that bypasses the
grouped-GEMM alignment check in CPUUnquantizedExperts.is_supported_config) and
`is_zentorch_moe_supported(layer)` (the layer gate), with the op probe `has_zentorch_op`
patched to True (it needs a Zen CPU and zentorch loaded; the gate logic after it is
vLLM's). Then `CPUUnquantizedExperts.process_weights_after_loading` on a stub layer:
with zentorch it returns before `_pad_moe_intermediate`, so the tensors must come back
untouched, as layoutc's identity pad does.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import itertools
from unittest import mock

import pytest
import torch

from tests.support.conformance import oracle

pytestmark = pytest.mark.conformance


@pytest.fixture(scope="module")
def zen():  # type: ignore[no-untyped-def]
    from vllm.model_executor.kernels.linear import zentorch_utils

    with mock.patch.object(zentorch_utils, "has_zentorch_op", return_value=True):
        yield zentorch_utils


def _known(act: str, dtype: str, tp: int, E: int) -> str | None:
    if dtype == "float16":
        return "zentorch_float16"
    if E == 1:
        return "zentorch_single_active_expert"
    return None


def test_zentorch_admission_matches_vllm(gen, zen) -> None:  # type: ignore[no-untyped-def]
    module = gen["zentorch_fused_moe"]
    tally = oracle.Tally()
    for E, H, I, tp, act, dtype in itertools.product((1, 2, 8, 128), (44, 64, 2816, 2880), (44, 45, 176, 704, 2880),
                                                     oracle.effective_tp_degrees(),
                                                     ("silu", "gelu", "gelu_tanh", "swigluoai", "relu2"),
                                                     ("bfloat16", "float16", "float32")):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, num_experts=E, hidden_size=H, intermediate_size=I,
                                           tp_size=tp, activation_name=act, dtype=oracle.DTYPES[dtype])
        admitted = ok and zen.is_zentorch_moe_config_supported(config)
        if ok:  # the layer gate agrees with the config gate on every layer the config gate sees
            layer = torch.nn.Module()
            layer.moe_config, layer.activation = config, config.activation
            assert zen.is_zentorch_moe_supported(layer) == admitted
        constants = dict(swiglu_alpha_milli=1702, swiglu_limit_milli=7000) if act == "swigluoai" else {}
        plan = oracle.plan_or_none(module, num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                                   activation=act, dtype=dtype, **constants)
        if admitted != (plan is not None):
            key = _known(act, dtype, tp, E) if admitted else None
            tally.record(key or "unexplained", f"E={E} H={H} I={I} tp={tp} act={act} {dtype}: vllm={admitted}")
        elif admitted:
            tally.sizes += 1
            if plan.intermediate_size_per_partition_padded != config.intermediate_size_per_partition:
                tally.record("unexplained", f"E={E} I={I} tp={tp}: layoutc pads, zentorch takes no pad")
    print("zentorch_fused_moe:", tally.summary())
    assert tally.decisions > 10_000 and tally.sizes > 1_000
    # swigluoai in float32 and sharded swigluoai (interleaved blocks of pairs) now agree with vLLM
    assert set(tally.disagreements) == {"zentorch_float16", "zentorch_single_active_expert"}, tally.summary()


def test_zentorch_layer_is_left_unpadded_by_vllm(gen, zen) -> None:  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    module = gen["zentorch_fused_moe"]
    E, H, I, tp = 4, 64, 180, 4   # I_pp = 45: the grouped GEMM would pad it to 64
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp)
    plan = module.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, activation="silu", dtype="bfloat16")
    w13, w2 = torch.randn(E, 2 * 45, H).bfloat16(), torch.randn(E, H, 45).bfloat16()
    layer = torch.nn.Module()
    layer.moe_config, layer.activation = config, config.activation
    layer.w13_weight = torch.nn.Parameter(w13.clone(), requires_grad=False)
    layer.w2_weight = torch.nn.Parameter(w2.clone(), requires_grad=False)
    experts = object.__new__(cpu_moe.CPUUnquantizedExperts)
    experts.moe_config = config
    with mock.patch.object(cpu_moe, "is_zentorch_moe_supported", zen.is_zentorch_moe_supported):
        experts.process_weights_after_loading(layer)
    assert experts._use_zentorch
    assert torch.equal(layer.w13_weight.data, module.pad_w13(w13, plan))
    assert torch.equal(layer.w2_weight.data, module.pad_w2(w2, plan))
