"""vLLM 0.32's CPU MoE experts under `enable_expert_parallel` (issue 23 item 4), pinned by
calling vLLM's own functions: nothing in vLLM 0.32 refuses EP for the unquantized CPU grouped
GEMM, and its `apply` hands the kernel the router's global ids, ignoring `expert_map`.

These are the two facts docs/vllm_plugin.md ("Expert parallelism") states and the plugin is
built on (check mode refuses an EP layer, replace mode remaps the ids). A vLLM upgrade that
refuses EP on CPU, or that starts remapping ids in `apply`, fails here.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from unittest import mock

import pytest
import torch

pytestmark = pytest.mark.conformance


def _ep_layer(ep_size: int = 2, ep_rank: int = 1, experts: int = 8) -> tuple[Any, Any]:
    """vLLM's FusedMoEConfig of one layer as FusedMoEParallelConfig.make builds it with EP on
    (tp 1, whole experts: tests/conformance/test_expert_parallel.py pins make itself), and its
    parallel config."""
    from vllm.model_executor.layers.fused_moe.config import FusedMoEParallelConfig

    from tests.support.conformance import oracle

    parallel = dataclasses.replace(FusedMoEParallelConfig.make_no_parallel(), tp_size=1, tp_rank=0,
                                   ep_size=ep_size, ep_rank=ep_rank, use_ep=True)
    config = oracle.moe_config(num_experts=experts, hidden_size=64, intermediate_size=64, tp_size=1)
    return dataclasses.replace(config, moe_parallel_config=parallel, num_local_experts=experts // ep_size), parallel


def test_cpu_grouped_gemm_admits_expert_parallelism() -> None:
    """vllm/model_executor/layers/fused_moe/experts/cpu_moe.py: CPUUnquantizedExperts
    `_supports_parallel_config` returns True for any parallel config, so the modular kernel's
    `is_supported_config` (modular_kernel.py, "parallel config ..." reason) admits an EP layer;
    only the Arm, Power and Zen int8 experts refuse it (`return not moe_parallel_config.use_ep`)."""
    import vllm.model_executor.layers.fused_moe.modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    config, parallel = _ep_layer()
    assert config.moe_parallel_config.use_ep and config.num_local_experts == 4
    for cls in (cpu_moe.CPUUnquantizedExperts, cpu_moe.X86CPUUnquantizedExperts):
        assert cls._supports_parallel_config(parallel) is True, cls
    assert cpu_moe.CPUUnquantizedExperts.is_supported_config(
        cpu_moe.CPUUnquantizedExperts, config, None, None, mk.FusedMoEActivationFormat.Standard) == (True, None)
    refusing = [c.__name__ for c in (cpu_moe.ArmCPUExpertsInt8, cpu_moe.PowerCPUExpertsInt8,
                                     cpu_moe.ZenCPUExpertsInt8, cpu_moe.CPUExpertsInt8, cpu_moe.CPUExpertsFp8,
                                     cpu_moe.CPUExpertsMxfp4, cpu_moe.CPUExpertsInt4)
                if not c._supports_parallel_config(parallel)]
    assert refusing == ["ArmCPUExpertsInt8", "PowerCPUExpertsInt8", "ZenCPUExpertsInt8"], refusing
    no_ep = dataclasses.replace(parallel, ep_size=1, ep_rank=0, use_ep=False)
    assert cpu_moe.ArmCPUExpertsInt8._supports_parallel_config(no_ep) is True


def test_cpu_grouped_gemm_apply_passes_global_ids() -> None:
    """CPUUnquantizedExperts.apply on EP rank 1 of 2 (experts 4..7 local): `_C::cpu_fused_moe`
    gets the router's global ids unchanged next to a w13 of 4 experts, whatever `expert_map`
    says (ids 5 and 7 are past the kernel's experts axis; the kernel does no bounds check)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    config, _ = _ep_layer()
    local, expert_map, _ = determine_expert_map(2, 1, 8, "linear")
    assert local == 4 and expert_map is not None and expert_map.tolist() == [-1, -1, -1, -1, 0, 1, 2, 3]
    experts = cpu_moe.CPUUnquantizedExperts(config, FUSED_MOE_UNQUANTIZED_CONFIG)
    calls: list[tuple[Any, ...]] = []
    ids = torch.tensor([[0, 7], [5, 2]], dtype=torch.int32)
    w13, w2 = torch.zeros(4, 128, 64), torch.zeros(4, 64, 64)
    with mock.patch.object(cpu_moe, "cpu_fused_moe", lambda *args: calls.append(args)):
        experts.apply(torch.empty(2, 64), torch.randn(2, 64), w13, w2, torch.ones(2, 2), ids, MoEActivation.SILU,
                      8, expert_map.to(torch.int32), None, None, torch.empty(0), torch.empty(0), None, False)
    assert len(calls) == 1
    passed_w13, passed_ids = calls[0][2], calls[0][7]
    assert passed_w13.shape[0] == 4 and torch.equal(passed_ids, ids), passed_ids
    assert int(passed_ids.max()) >= passed_w13.shape[0]  # a global id past this rank's experts


def test_audit_ep_rows_agree_with_vllm() -> None:
    """`layoutc audit --ep` against vLLM's own functions, for real model configs: each rank's
    experts (determine_expert_map, both placements), the padded intermediate under EP (the
    layer's tp 1: CPUUnquantizedExperts._padded_intermediate_size of that FusedMoEConfig, per ISA
    class) and admission (each class's is_supported_config, the grouped-GEMM route: zentorch
    off, and the Arm/Power classes' host check answered yes so their rules run on x86).
    Gemma-4's 704 is unpadded under EP where tp 4 pads 176 to 192 (the same function, TP layer)."""
    import vllm.model_executor.layers.fused_moe.modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    from layoutc.tools.audit import ep_report, load_contracts
    from layoutc.tools.hfconfig import load_model_config
    from tests.support.conformance import oracle

    contracts, problems = load_contracts(["contracts/vllm_cpu_grouped_gemm.moe"])
    assert problems is None, problems
    classes = {"vec": cpu_moe.CPUUnquantizedExperts, "amx": cpu_moe.X86CPUUnquantizedExperts,
               "neon": cpu_moe.ArmCPUUnquantizedExperts, "vsx": cpu_moe.PowerCPUUnquantizedExperts}
    compared = 0
    for name in ("qwen3-30b-a3b", "mixtral-8x7b", "gemma-4-26b-a4b", "olmoe-1b-7b"):
        model = load_model_config(name)
        for row in ep_report([(name, model)], [2, 3, 4, 8], contracts):
            ep = row.ep_size
            _, parallel = _ep_layer(ep, 0, model.num_experts)
            layer = oracle.moe_config(num_experts=model.num_experts, hidden_size=model.hidden_size,
                                      intermediate_size=model.intermediate_size, tp_size=1,
                                      activation_name=model.activation, dtype=getattr(torch, str(model.dtype)))
            layer = dataclasses.replace(layer, moe_parallel_config=parallel)
            cls = classes[str(row.variant["isa"])]
            assert row.intermediate_size_per_partition == layer.intermediate_size_per_partition, row
            assert row.intermediate_size_per_partition_padded == cls._padded_intermediate_size(layer), row
            with mock.patch.object(cpu_moe, "is_zentorch_moe_config_supported", lambda config: False), \
                    mock.patch.object(cls, "_supports_current_device", staticmethod(lambda: True)):
                admitted, why = cls.is_supported_config(cls, layer, None, None, mk.FusedMoEActivationFormat.Standard)
            assert row.admitted == admitted, (row, why)
            for placement in ("linear", "round_robin"):
                for rank, ids in enumerate(row.experts_by_rank[placement]):
                    count, emap, _ = determine_expert_map(ep, rank, model.num_experts, placement)
                    assert emap is not None
                    theirs = sorted((e for e in range(model.num_experts) if int(emap[e]) >= 0), key=lambda e: int(emap[e]))
                    assert list(ids) == theirs and len(ids) == count, (name, ep, placement, rank)
            assert row.local_num_experts == max(len(ids) for ids in row.experts_by_rank["linear"])
            compared += 1
    assert compared == 4 * 4 * 4  # models x EP degrees x ISAs
    tp4 = oracle.moe_config(num_experts=128, hidden_size=2816, intermediate_size=704, tp_size=4,
                            activation_name="gelu_tanh")
    assert (tp4.intermediate_size_per_partition, cpu_moe.CPUUnquantizedExperts._padded_intermediate_size(tp4)) == \
        (176, 192)
