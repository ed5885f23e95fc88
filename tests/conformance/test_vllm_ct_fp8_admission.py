"""Block FP8 [128, 128] admission per quantization method, against vLLM 0.32's own methods
(issue 45 item 5): at intermediate 1408 (and 1536, 2048), tp 1 / 2 / 4 / 8,

- quant_method "compressed-tensors": `CompressedTensorsW8A8Fp8MoEMethod` (with the Marlin backend,
  which its select_fp8_moe_backend picks) and its `create_weights` (validate_fp8_block_shape_moe) admit
  exactly where contract marlin_moe_ct_fp8's plan() does; where both admit, each rank's tensors
  loaded by vLLM's RoutedExperts.weight_loader into the method's parameters equal the contract's
  generated alloc + load and shard, bit for bit;
- quant_method "fp8": `Fp8MoEMethod` admits (TP-shard padded: 768 / 384 / 256 at I 1408) exactly
  where marlin_moe_fp8's plan() does, with the same per-rank size, and its tensors at the first
  GPU op equal the contract's (test_vllm_quant_loading's `_vllm_fp8_rank`).

Patched, as in test_vllm_quant_loading.py: MarlinExperts' device probe and the TP world size.
"""

# ruff: noqa: E741  (I is the field's name for intermediate_size)

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.conformance.test_vllm_quant_loading import (
    FP8_H,
    E,
    _compare,
    _fp8_checkpoint,
    _fp8_layoutc_rank,
    _fp8_marlin_world,
    _layoutc_rank,
    _vllm_fp8_rank,
)
from tests.support.conformance import oracle

pytestmark = pytest.mark.conformance

TP = (1, 2, 4, 8)
I_SIZES = (1408, 1536, 2048)  # 1408: 704 / 352 / 176 per rank; 1536 at tp 8: 192; 2048 whole blocks at every tp


def _ct_checkpoint(I: int, seed: int) -> dict[str, dict[str, list[torch.Tensor]]]:
    """_fp8_checkpoint's tensors under compressed-tensors' names (`weight_scale`, not `weight_scale_inv`)."""
    return {k.replace("_scale_inv", "_scale"): v for k, v in _fp8_checkpoint(I, seed).items()}


def _vllm_ct_rank(I: int, tp: int, rank: int,
                  checkpoint: dict[str, dict[str, list[torch.Tensor]]]) -> tuple[dict[str, torch.Tensor] | None, str]:
    """vLLM's tensors for one rank after CompressedTensorsW8A8Fp8MoEMethod.create_weights and
    RoutedExperts.weight_loader (the block-scale branch), or (None, why) where vLLM refuses."""
    from compressed_tensors.quantization import QuantizationArgs
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_fp8 as ct,
    )

    ok, config = oracle.call_or_reject(oracle.moe_config, num_experts=E, hidden_size=FP8_H, intermediate_size=I,
                                       tp_size=tp, moe_backend="marlin")
    if not ok:
        return None, str(config)
    weights = QuantizationArgs(num_bits=8, type="float", strategy="block", block_structure=[128, 128],
                               symmetric=True, dynamic=False)
    inputs = QuantizationArgs(num_bits=8, type="float", strategy="group", group_size=128, symmetric=True,
                              dynamic=True)
    with _fp8_marlin_world(tp):
        ok, method = oracle.call_or_reject(ct.CompressedTensorsW8A8Fp8MoEMethod, weights, inputs, config)
        if not ok:
            return None, str(method)
        assert method.experts_cls.__name__ == "MarlinExperts", method.experts_cls
        ranked = oracle.rank_config(config, rank)
        layer = oracle.routed_experts_stub(ranked, None, method)
        ok, why = oracle.call_or_reject(method.create_weights, layer, E, FP8_H, ranked.intermediate_size_per_partition,
                                        torch.bfloat16, weight_loader=layer.weight_loader)
        if not ok:
            return None, str(why)
        oracle.load_experts(layer, checkpoint)
    return {n: getattr(layer, n).data for n in ("w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale")}, ""


@pytest.mark.parametrize("tp", TP)
def test_compressed_tensors_block_fp8_admission_and_loading_match_vllm(gen, tp: int) -> None:  # type: ignore[no-untyped-def]
    module = gen["marlin_moe_ct_fp8"]
    seen: dict[int, bool] = {}
    tensors = 0
    for I in I_SIZES:
        plan = oracle.plan_or_none(module, num_experts=E, hidden_size=FP8_H, intermediate_size=I, tp_size=tp,
                                   scheme="fp8_block128", scale_dtype="float32", activation="silu")
        checkpoint = _ct_checkpoint(I, seed=I + tp)
        for rank in range(tp):
            where = f"compressed-tensors block_fp8 I={I} tp={tp} rank={rank}"
            vllm, why = _vllm_ct_rank(I, tp, rank, checkpoint)
            assert (vllm is None) == (plan is None), f"{where}: vllm admits={vllm is not None} ({why}) " \
                                                      f"layoutc={plan is not None}"
            seen[I] = vllm is not None
            if vllm is None:
                assert "is not divisible by weight quantization block_n = 128" in why, (where, why)
                break
            assert plan.intermediate_size_per_partition_padded == I // tp, where
            names = sorted(checkpoint)
            tensors += _compare(where, vllm, *_layoutc_rank(module, plan, rank, checkpoint, names, n_dim=0))
    # the configuration: compressed-tensors admits I 1408 at tp 1 only
    assert seen[1408] == (tp == 1), seen
    assert seen[2048], seen
    assert tensors >= tp * 4 * 2, tensors


@pytest.mark.parametrize("tp", TP)
def test_fp8_method_pads_block_fp8_at_1408_as_vllm_does(gen, tp: int) -> None:  # type: ignore[no-untyped-def]
    module = gen["marlin_moe_fp8"]
    I = 1408
    plan = oracle.plan_or_none(module, num_experts=E, hidden_size=FP8_H, intermediate_size=I, tp_size=tp,
                               scheme="fp8_block128", scale_dtype="float32", activation="silu")
    assert plan is not None
    assert plan.intermediate_size_per_partition == {1: 1408, 2: 768, 4: 384, 8: 256}[tp]
    checkpoint = _fp8_checkpoint(I, seed=I + tp)
    tensors = 0
    for rank in range(tp):
        vllm: Any = _vllm_fp8_rank(I, tp, rank, checkpoint)
        assert vllm is not None, f"Fp8MoEMethod refuses I={I} tp={tp}"
        tensors += _compare(f"fp8 block_fp8 I={I} tp={tp} rank={rank}", vllm,
                            *_fp8_layoutc_rank(module, plan, rank, checkpoint))
    assert tensors == tp * 4 * 2
