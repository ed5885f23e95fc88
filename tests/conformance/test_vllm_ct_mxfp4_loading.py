"""compressed-tensors MXFP4 (`mxfp4-pack-quantized`) through vLLM 0.32's own loading, against
contract marlin_moe_ct_mxfp4's per-rank loaders (issue 45 item 5).

vLLM 0.32's method for it is CompressedTensorsW4A4Mxfp4MoEMethod; on this CPU host it picks
MarlinExperts (no CUTLASS FP4, not XPU), a CUDA kernel: vLLM 0.32 CPU has no experts class
for this method, so it cannot run here, and the comparison is with what vLLM's loading hands
the kernel. For tp 1, 2, 4, 8 and every rank: the method's create_weights on a module carrying
RoutedExperts' own loading methods (oracle.routed_experts_stub), the checkpoint's
`weight_packed` / `weight_scale` per expert through RoutedExperts.weight_loader (the GROUP scale
branch), then process_weights_after_loading on CPU up to its first GPU op,
ops.gptq_marlin_repack in prepare_moe_fp4_layer_for_marlin (after the rename to w13_weight /
w2_weight and the shape assertions; nothing is padded). layoutc: the generated alloc + load per
expert and role, and shard of the stacked checkpoint. Bit for bit.

Admission: where I / tp is not whole 32-value groups vLLM's create_weights allocates I_pp // 32
w2 scale groups (a floor) and its loader cuts the checkpoint's scales at the wrong place without
an error; the contract refuses (known.py `mxfp4_ipp_not_32`, the same generic-loader cut as
Mxfp4MoEMethod's). Every other admission agrees.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import pytest
import torch

from tests.conformance.test_vllm_quant_loading import E, _compare, _layoutc_rank
from tests.support.conformance import oracle
from tests.support.conformance.known import KNOWN

pytestmark = pytest.mark.conformance

TP = (1, 2, 4, 8)
H = 256
I_SIZES = (704, 1024, 2880)  # 704: 176 / 88 per rank at tp 4 / 8 (not whole 32-groups); 2880: gpt-oss's I
NAMES = {"w13_weight_packed": "w13_weight", "w13_weight_scale": "w13_weight_scale",
         "w2_weight_packed": "w2_weight", "w2_weight_scale": "w2_weight_scale"}


def _checkpoint(I: int, seed: int) -> dict[str, dict[str, list[torch.Tensor]]]:
    """Per expert, as compressed-tensors' MXFP4PackedCompressor stores a projection [N, K]:
    weight_packed uint8 [N, K / 2] (random bytes: every nibble possible), weight_scale uint8
    [N, K / 32] (E8M0, no 255: NaN), under vLLM's parameter names."""
    gen = torch.Generator().manual_seed(seed)

    def u8(*shape: int, high: int = 256) -> torch.Tensor:
        return torch.randint(0, high, shape, dtype=torch.uint8, generator=gen)

    def proj(n: int, k: int) -> dict[str, torch.Tensor]:
        return {"weight_packed": u8(n, k // 2), "weight_scale": u8(n, k // 32, high=255)}

    experts = [{"w1": proj(I, H), "w3": proj(I, H), "w2": proj(H, I)} for _ in range(E)]
    return {f"{stem}_{suffix}": {sid: [experts[e][sid][suffix] for e in range(E)] for sid in sids}
            for stem, sids in (("w13", ("w1", "w3")), ("w2", ("w2",))) for suffix in ("weight_packed", "weight_scale")}


def _vllm_rank(I: int, tp: int, rank: int, checkpoint: dict[str, dict[str, list[torch.Tensor]]]
               ) -> tuple[dict[str, torch.Tensor] | None, str]:
    """vLLM's tensors for one rank at ops.gptq_marlin_repack, or (None, why) where vLLM refuses."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w4a4_mxfp4 as ct,
    )
    from vllm.model_executor.layers.quantization.utils import marlin_utils_fp4

    ok, config = oracle.call_or_reject(oracle.moe_config, num_experts=E, hidden_size=H, intermediate_size=I,
                                       tp_size=tp)
    if not ok:
        return None, str(config)
    method = ct.CompressedTensorsW4A4Mxfp4MoEMethod(config)
    assert method.experts_cls is not None and method.experts_cls.__name__ == "MarlinExperts", method.experts_cls
    ranked = oracle.rank_config(config, rank)
    layer = oracle.routed_experts_stub(ranked, None, method)
    ok, why = oracle.call_or_reject(method.create_weights, layer, E, H, ranked.intermediate_size_per_partition,
                                    torch.bfloat16, weight_loader=layer.weight_loader)
    if not ok:
        return None, str(why)
    layer.params_dtype = torch.bfloat16
    oracle.load_experts(layer, checkpoint)
    oracle.run_until_gpu_op(lambda: method.process_weights_after_loading(layer), marlin_utils_fp4.ops,
                            "gptq_marlin_repack")
    return {n: getattr(layer, n).data for n in ("w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale")}, ""


@pytest.mark.parametrize("tp", TP)
def test_compressed_tensors_mxfp4_rank_tensors_match_vllm_loading_stop_at_gptq_marlin_repack(gen, tp: int) -> None:  # type: ignore[no-untyped-def]
    module = gen["marlin_moe_ct_mxfp4"]
    assert "mxfp4_ipp_not_32" in KNOWN
    compared = tensors = pinned = 0
    for I in I_SIZES:
        plan = oracle.plan_or_none(module, num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                                   activation="silu")
        checkpoint = _checkpoint(I, seed=I + tp)
        for rank in range(tp):
            where = f"ct_mxfp4 I={I} tp={tp} rank={rank}"
            vllm, why = _vllm_rank(I, tp, rank, checkpoint)
            if plan is None and vllm is not None:
                # known.py mxfp4_ipp_not_32: vLLM loads a floor of the w2 scale groups, cut in the wrong place
                assert (I // tp) % 32 != 0, f"{where}: vLLM admits, layoutc refuses, and I_pp % 32 == 0"
                assert vllm["w2_weight_scale"].shape[-1] == (I // tp) // 32, where
                pinned += rank == 0
                continue
            assert (vllm is None) == (plan is None), f"{where}: vllm admits={vllm is not None} ({why}) " \
                                                      f"layoutc={plan is not None}"
            if vllm is None:
                break
            compared += rank == 0
            ours = {NAMES[k]: v for k, v in checkpoint.items()}
            tensors += _compare(where, vllm, *_layoutc_rank(module, plan, rank, ours, sorted(ours), n_dim=0))
    assert compared >= 1 and tensors == compared * tp * 4 * 2, (compared, tensors)
    assert (pinned > 0) == (tp >= 4), pinned  # 704 / 4 = 176, 704 / 8 = 88, 2880 / 8 = 360: not whole 32-groups
