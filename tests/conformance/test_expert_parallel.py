"""Expert parallelism against vLLM 0.32's own functions.

vLLM side, called directly:
- `determine_expert_map(ep_size, ep_rank, global_num_experts, placement)`
  (vllm/model_executor/layers/fused_moe/expert_map_manager.py): each rank's local count and
  int32 expert map, compared with `layoutc.runtime.expert_map.local_experts`;
- `FusedMoEParallelConfig.make(tp, pcp, dp, sp, parallel_config)` (fused_moe/config.py),
  with the process-group lookups it makes patched to the rank under test, compared with
  `layoutc.runtime.experts.parallel_config`.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

from layoutc.runtime.expert_map import local_experts
from layoutc.runtime.experts import PLACEMENTS, ExpertParallelError, parallel_config
from tests.support.conformance import oracle

pytestmark = pytest.mark.conformance

EXPERTS = (8, 60, 64, 128, 256, 257)
EP_DEGREES = (2, 3, 4, 8, 16)


def _plan(num_experts: int, ep_size: int, placement: str, redundant: int = 0) -> SimpleNamespace:
    return SimpleNamespace(num_experts=num_experts, ep_size=ep_size, expert_placement=placement,
                           num_redundant_experts=redundant)


def test_local_experts_equal_determine_expert_map() -> None:
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    tally = oracle.Tally()
    for experts, ep, placement in itertools.product(EXPERTS, EP_DEGREES, PLACEMENTS):
        for rank in range(ep):
            try:
                count, vmap, _ = determine_expert_map(ep, rank, experts, placement)
                admitted = True
            except RuntimeError:  # round_robin: torch.arange(rank, E, ep) raises for a rank > E
                assert placement == "round_robin" and rank > experts
                admitted, count, vmap = False, None, None
            tally.decisions += 1
            try:
                mine, lmap = local_experts(rank, _plan(experts, ep, placement))
            except ExpertParallelError as exc:
                # layoutc refuses a degree above the experts (EP01); vLLM gives those ranks none.
                assert exc.code == "EP01" and ep > experts, exc
                if admitted:
                    tally.record("ep_exceeds_experts", f"E={experts} ep={ep} {placement} rank={rank}: "
                                 f"vLLM holds {count}")
                continue
            assert admitted, (experts, ep, placement, rank)
            assert mine == count, (experts, ep, placement, rank)
            assert lmap is not None and vmap is not None
            assert lmap.dtype == vmap.dtype == torch.int32
            assert torch.equal(lmap, vmap), (experts, ep, placement, rank)
            tally.sizes += 1
    # 8 experts over 16 ranks is the only degree above the experts in the sweep. linear gives
    # ranks 8..15 no experts and the others one each (16 admissions); round_robin admits 0..8
    # (rank 8 with none) and crashes on 9..15 (both refuse).
    assert dict(tally.disagreements) == {"ep_exceeds_experts": 25}, tally.summary()
    assert tally.sizes == sum(ep for e, ep in itertools.product(EXPERTS, EP_DEGREES) if ep <= e) * 2


def test_local_experts_redundant_equal_determine_expert_map() -> None:
    """EPLB: vLLM places the physical experts (logical + redundant) the same way."""
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    for experts, redundant, ep in ((8, 8, 4), (60, 4, 8), (256, 32, 16), (128, 3, 3)):
        for rank in range(ep):
            count, vmap, _ = determine_expert_map(ep, rank, experts + redundant, "linear")
            mine, lmap = local_experts(rank, _plan(experts, ep, "linear", redundant))
            assert mine == count and lmap is not None and torch.equal(lmap, vmap)


def test_ep_size_one_has_no_map() -> None:
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    assert determine_expert_map(1, 0, 64, "linear")[:2] == local_experts(0, _plan(64, 1, "linear")) == (64, None)


def _vllm_parallel(tp: int, dp: int, pcp: int, ep: bool, tp_rank: int, dp_rank: int, pcp_rank: int):  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.fused_moe import config

    vllm_parallel = SimpleNamespace(enable_expert_parallel=ep, all2all_backend="allgather_reducescatter",
                                    enable_eplb=False)
    with mock.patch.object(config, "get_tensor_model_parallel_rank", return_value=tp_rank), \
            mock.patch.object(config, "get_dp_group", return_value=SimpleNamespace(rank_in_group=dp_rank)), \
            mock.patch.object(config, "get_pcp_group", return_value=SimpleNamespace(rank_in_group=pcp_rank)):
        return config.FusedMoEParallelConfig.make(tp, pcp, dp, 1, vllm_parallel)


def test_parallel_config_equals_fused_moe_parallel_config_make() -> None:
    compared = 0
    for tp, dp, pcp, ep in itertools.product((1, 2, 3, 4, 8), (1, 2, 4), (1, 2), (False, True)):
        for tp_rank, dp_rank, pcp_rank in itertools.product(range(tp), range(dp), range(pcp)):
            v = _vllm_parallel(tp, dp, pcp, ep, tp_rank, dp_rank, pcp_rank)
            mine = parallel_config(tp, dp, pcp, ep, tp_rank, dp_rank, pcp_rank)
            theirs = (v.tp_size, v.tp_rank, v.dp_size, v.dp_rank, v.pcp_size, v.pcp_rank, v.ep_size, v.ep_rank,
                      v.use_ep)
            assert (mine.tp_size, mine.tp_rank, mine.dp_size, mine.dp_rank, mine.pcp_size, mine.pcp_rank,
                    mine.ep_size, mine.ep_rank, mine.use_ep) == theirs, (tp, dp, pcp, ep, tp_rank, dp_rank, pcp_rank)
            compared += 1
    assert compared == 2 * sum(t * d * p for t in (1, 2, 3, 4, 8) for d in (1, 2, 4) for p in (1, 2))


def test_generated_local_experts_equal_determine_expert_map(gen) -> None:  # type: ignore[no-untyped-def]
    """The generated modules' `local_experts` and plan()'s EP checks, against vLLM."""
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    cpu, grouped = gen["vllm_cpu_grouped_gemm"], gen["torch_grouped_mm"]
    compared = refused = 0
    for experts, ep, placement in itertools.product(EXPERTS, EP_DEGREES, PLACEMENTS):
        try:
            plan = cpu.plan(num_experts=experts, hidden_size=64, intermediate_size=64, tp_size=1, isa="vec",
                            activation="silu", dtype="bfloat16", ep_size=ep, expert_placement=placement)
        except ValueError as exc:  # the generated package's own copy of ExpertParallelError
            assert getattr(exc, "code", None) == "EP01" and ep > experts, exc
            refused += 1
            continue
        for rank in range(ep):
            count, vmap, _ = determine_expert_map(ep, rank, experts, placement)
            mine, lmap = cpu.local_experts(rank, plan)
            assert mine == count and lmap is not None and torch.equal(lmap, vmap)
            assert mine <= plan.local_num_experts  # every local id is below the kernel's experts axis
            compared += 1
    assert refused == 2 and compared == sum(ep for e, ep in itertools.product(EXPERTS, EP_DEGREES) if ep <= e) * 2
    for experts, redundant, ep in ((8, 8, 4), (60, 4, 8)):
        plan = grouped.plan(num_experts=experts, hidden_size=64, intermediate_size=64, tp_size=1, activation="silu",
                            dtype="bfloat16", ep_size=ep, num_redundant_experts=redundant)
        for rank in range(ep):
            count, vmap, _ = determine_expert_map(ep, rank, experts + redundant, "linear")
            mine, lmap = grouped.local_experts(rank, plan)
            assert mine == count and lmap is not None and torch.equal(lmap, vmap)
