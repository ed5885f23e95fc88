"""compressed-tensors W4A16 / W8A16 admission against vLLM 0.32's own method (issue 45 item 5):
`CompressedTensorsWNA16MoEMethod.create_weights` (compressed_tensors_moe_wna16.py) raises ValueError
where a rank's slice of the intermediate (I / tp) or hidden_size is not whole scale groups, and never
pads the TP shard. At group 32 / 128 / channelwise, int4 and int8, a grid of intermediate and hidden
sizes and tp 1 / 2 / 4 / 8, contracts vllm_ct_wna16_int4_moe / vllm_ct_wna16_int8_moe admit exactly
where vLLM's create_weights does (ValueError = refused), with vLLM's per-rank size, and where both
admit, the contract's rank-0 tensors (alloc_*) have the shapes of the parameters create_weights registers.

The method is built once per (bits, group) with the Marlin backend for a layer Marlin takes
(MarlinExperts' device probe patched, as in test_vllm_packers_loading.py): the constructor's backend
pick is the host's; the rule under test is create_weights', called at each grid size.
"""

# ruff: noqa: E741  (I is the field's name for intermediate_size)

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from tests.support.conformance import oracle

pytestmark = pytest.mark.conformance

E = 4
TP = (1, 2, 4, 8)
GROUPS = (32, 128, -1)
I_SIZES = (704, 1408, 1536, 2048)  # 1408 at group 128: 704 / 352 / 176 per rank, none whole groups
H_SIZES = (2048, 2112)  # 2112 = 16.5 groups of 128, 66 of 32
#: contract tensor -> the parameter create_weights registers for it
PARAMS = {"w13_weight_packed": "w13_weight_packed", "w13_weight_scale": "w13_weight_scale",
          "w2_weight_packed": "w2_weight_packed", "w2_weight_scale": "w2_weight_scale"}


def _method(bits: int, group: int) -> Any:
    """vLLM's CompressedTensorsWNA16MoEMethod for symmetric int `bits` weights at `group` (-1: strategy
    channel), built on the Marlin backend for a layer Marlin takes (H 2048, I 2048, tp 1): the constructor's
    backend pick (select_wna16_moe_backend) is the host's; create_weights reads only the method's
    strategy, group size, packing and the layer's gating, and the sizes it is called with."""
    from unittest import mock

    from compressed_tensors.quantization import QuantizationArgs
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExperts
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_wna16 as ct,
    )

    config = oracle.moe_config(num_experts=E, hidden_size=2048, intermediate_size=2048, tp_size=1,
                               activation_name="silu", dtype=torch.bfloat16, moe_backend="marlin")
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=True, strategy="channel" if group == -1 else "group",
                            group_size=None if group == -1 else group)
    with mock.patch.object(MarlinExperts, "_supports_current_device", staticmethod(lambda: True)):
        method = ct.CompressedTensorsWNA16MoEMethod(args, None, config)
    assert method.experts_cls.__name__ == "MarlinExperts", method.experts_cls
    return method


def _vllm(method: Any, H: int, I: int, tp: int) -> tuple[dict[str, tuple[int, ...]] | None, str]:
    """The parameter shapes `method.create_weights` registers for rank 0 of a layer (H, I, tp) (bf16
    scales), or (None, its ValueError) where it refuses."""
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                               activation_name="silu", dtype=torch.bfloat16)
    ranked = oracle.rank_config(config, 0)
    layer = oracle.routed_experts_stub(ranked, None, method)
    try:
        method.create_weights(layer, E, H, ranked.intermediate_size_per_partition, torch.bfloat16,
                              weight_loader=layer.weight_loader)
    except ValueError as exc:
        return None, str(exc)
    return {n: tuple(getattr(layer, p).shape) for n, p in PARAMS.items()}, ""


@pytest.mark.parametrize("bits", (4, 8))
def test_ct_wna16_admission_matches_vllms_create_weights(gen: Any, bits: int) -> None:
    module = gen[f"vllm_ct_wna16_int{bits}_moe"]
    logging.disable(logging.WARNING)
    seen = {True: 0, False: 0}
    try:
        for group in GROUPS:
            method = _method(bits, group)
            for H in H_SIZES:
                for I in I_SIZES:
                    for tp in TP:
                        where = f"int{bits} group={group} H={H} I={I} tp={tp}"
                        plan = oracle.plan_or_none(module, num_experts=E, hidden_size=H, intermediate_size=I,
                                                   tp_size=tp, group_size=group, activation="silu", dtype="bfloat16")
                        vllm, why = _vllm(method, H, I, tp)
                        assert (vllm is None) == (plan is None), f"{where}: vllm admits={vllm is not None} ({why})"
                        seen[vllm is not None] += 1
                        if vllm is None:
                            assert "divisible by group_size" in why, (where, why)
                            continue
                        assert plan.intermediate_size_per_partition_padded == I // tp, where
                        shapes = {n: tuple(getattr(module, f"alloc_{n}")(plan, 0).shape) for n in PARAMS}
                        assert shapes == vllm, (where, shapes, vllm)
    finally:
        logging.disable(logging.NOTSET)
    # both verdicts occur, and the configuration (group 128, I 1408) is refused at tp 2 / 4 / 8
    assert seen[True] >= 20 and seen[False] >= 20, seen
    refused = [tp for tp in TP if oracle.plan_or_none(module, num_experts=E, hidden_size=2048, intermediate_size=1408,
                                                      tp_size=tp, group_size=128, activation="silu",
                                                      dtype="bfloat16") is None]
    assert refused == [2, 4, 8], refused
