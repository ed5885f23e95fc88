"""The plugin beyond vLLM's own rules, without an engine: the support gate, EP ids, the messages.

Oracles: vLLM 0.32's own `CPUUnquantizedExperts.is_supported_config` and
`select_unquantized_moe_backend` on vLLM's own FusedMoEConfig (tests/support/conformance/oracle.py
moe_config), its `determine_expert_map` (fused_moe/expert_map_manager.py), and its real
`process_weights_after_loading`. The engine runs are tests/engine/test_vllm_plugin_engine.py.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from tests.tools.test_vllm_plugin import CONTRACT_LINE, _layer, _require_vllm

pytestmark = [pytest.mark.kernel, pytest.mark.conformance]


@pytest.fixture
def cpu_moe(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    _require_vllm()
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe as module

    from layoutc.tools.vllm_plugin import hook

    hook.uninstall()
    monkeypatch.setattr(module, "is_zentorch_moe_supported", lambda layer: False)
    monkeypatch.setattr(module, "is_zentorch_moe_config_supported", lambda config: False)
    yield module
    hook.uninstall()


def _gpt_oss_tp4() -> Any:
    """vLLM's FusedMoEConfig of a gpt-oss-shaped layer: swigluoai, I 704 over tp 4 (176 per rank)."""
    import torch

    from tests.support.conformance.oracle import moe_config

    return moe_config(hidden_size=256, intermediate_size=704, tp_size=4, activation_name="swigluoai",
                      dtype=torch.bfloat16)


def _select(config: Any) -> Any:
    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method

    # the name UnquantizedFusedMoEMethod.__init__ calls, as it calls it (by keyword)
    return method.select_unquantized_moe_backend(moe_config=config)


def test_vllm_alone_refuses_the_unaligned_swigluoai_shard(cpu_moe) -> None:  # type: ignore[no-untyped-def]
    config = _gpt_oss_tp4()
    cls = cpu_moe.CPUUnquantizedExperts
    assert cls.is_supported_config(cls, config, None, None, cls.activation_format()) == (
        False, "kernel requires hidden and intermediate dimensions divisible by 32")
    with pytest.raises(NotImplementedError, match="No Unquantized MoE backend supports the deployment"):
        _select(config)


def test_replace_answers_the_gate_with_the_contract(cpu_moe) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import hook

    hook.install("replace")
    config = _gpt_oss_tp4()
    cls = cpu_moe.CPUUnquantizedExperts
    assert cls.is_supported_config(cls, config, None, None, cls.activation_format()) == (True, None)
    backend, chosen = _select(config)
    assert backend.value == "CPU" and issubclass(chosen, cls), (backend, chosen)
    # An aligned shard is admitted by both; a hidden size the contract refuses is refused by it.
    odd = dataclasses.replace(config, hidden_dim=100)
    ok, reason = cls.is_supported_config(cls, odd, None, None, cls.activation_format())
    assert not ok and "hidden_size must be a multiple of the ISA's output alignment" in reason, reason
    with pytest.raises(hook.LayoutcVllmError, match="layoutc: vLLM refuses this MoE layer"):
        _select(odd)
    hook.uninstall()
    assert cls.is_supported_config(cls, config, None, None, cls.activation_format())[0] is False


def test_check_names_vllms_real_reason_and_the_contracts_verdict(cpu_moe) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import hook

    hook.install("check")
    config = _gpt_oss_tp4()
    cls = cpu_moe.CPUUnquantizedExperts
    assert cls.is_supported_config(cls, config, None, None, cls.activation_format())[0] is False  # vLLM's answer
    with pytest.raises(hook.LayoutcVllmError) as info:
        _select(config)
    message = str(info.value)
    for needle in ("No Unquantized MoE backend supports the deployment configuration.",
                   "CPUUnquantizedExperts._supports_grouped_gemm refused it: kernel requires hidden and "
                   "intermediate dimensions divisible by 32",
                   "contract vllm_cpu_grouped_gemm admits it and pads intermediate_size_per_partition 176 -> 192",
                   "activation swigluoai, hidden 256, intermediate 704 over tp 4", "LAYOUTC_VLLM=replace"):
        assert needle in message, (needle, message)


# ---- expert parallelism -----------------------------------------------------------------


@pytest.mark.parametrize("experts, ep_size", [(8, 2), (60, 3), (64, 4), (257, 8)])
@pytest.mark.parametrize("placement", ["linear", "round_robin"])
def test_replace_apply_maps_global_ids_as_vllms_expert_map(cpu_moe, monkeypatch: pytest.MonkeyPatch, experts: int,
                                                           ep_size: int, placement: str) -> None:  # type: ignore[no-untyped-def]
    """vLLM's apply wrapped: the kernel sees only the pairs routed to the rank's experts, with
    their local ids (never a foreign pair, not even at weight 0: issue 39), and the rank's
    output is its pairs' sum per token."""
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    from layoutc.tools.vllm_plugin import check, ep, hook

    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def kernel(*a):  # type: ignore[no-untyped-def]
        # output = sum_k w * (id + 1) * x: which pairs ran shows in the output
        seen.append((a[6].clone(), a[7].clone()))
        a[0].copy_((a[6] * (a[7].float() + 1)).sum(1, keepdim=True) * a[1].float())

    monkeypatch.setattr(cpu_moe, "cpu_fused_moe", kernel)
    hook.install("replace")
    gen = check.module("grouped_gemm", cpu_moe.CPUUnquantizedExperts,
                       check.LayerInfo("layer", experts, 256, 704, 1, "silu", torch.bfloat16, "vec"))
    lay = check.layout(gen)
    tokens = torch.Generator().manual_seed(experts)
    ids = torch.randint(0, experts, (64, 4), generator=tokens, dtype=torch.int32)
    weights = torch.rand(64, 4, generator=tokens)
    x = torch.randn(64, 8, generator=tokens)
    total = torch.zeros(64)
    for rank in range(ep_size):
        local, vllm_map, _ = determine_expert_map(ep_size, rank, experts, placement)
        info = check.LayerInfo("layer", local, 256, 704, 1, "silu", torch.bfloat16, "vec", ep_size=ep_size,
                               expert_placement=placement, global_experts=experts)
        ex = object.__new__(cpu_moe.CPUUnquantizedExperts)
        ex._use_zentorch, ex.quant_config = False, SimpleNamespace(w1_bias=None, w2_bias=None)
        setattr(ex, ep.MAP_ATTR, ep.expert_map(lay, check.admit(gen, info), rank, vllm_map, "layer", local))
        output = torch.full((64, 8), float("nan"))
        ex.apply(output=output, hidden_states=x, w1=None, w2=None, topk_weights=weights, topk_ids=ids,
                 activation=MoEActivation.SILU, global_num_experts=experts, expert_map=vllm_map, a1q_scale=None,
                 a2_scale=None, workspace13=None, workspace2=None, expert_tokens_meta=None,
                 apply_router_weight_on_input=False)
        got_w, got_ids = seen[-1]
        want = vllm_map[ids.long()]
        mine = want >= 0
        assert got_ids.dtype == ids.dtype and got_ids.shape == got_w.shape
        # exactly the routed local pairs, each once, in token order
        assert sorted(got_ids.reshape(-1).tolist()) == sorted(want[mine].tolist())
        assert sorted(got_w.reshape(-1).tolist()) == sorted(weights[mine].tolist())
        assert int(got_ids.min()) >= 0 and int(got_ids.max()) < local
        per_token = (weights * (want.float() + 1) * mine).sum(1, keepdim=True) * x
        assert torch.allclose(output, per_token, rtol=1e-6, atol=1e-6)
        total += (weights * mine).sum(1)
    assert torch.allclose(total, weights.sum(1), rtol=1e-6)  # every routed expert is on exactly one rank


def test_the_contract_map_is_held_to_vllms(cpu_moe) -> None:  # type: ignore[no-untyped-def]
    import torch
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    from layoutc.tools.vllm_plugin import LayoutcVllmError, check, ep

    info = check.LayerInfo("layer", 4, 256, 704, 1, "silu", torch.bfloat16, "vec", ep_size=2,
                           expert_placement="linear", global_experts=8)
    gen = check.module("grouped_gemm", cpu_moe.CPUUnquantizedExperts, info)
    plan = check.admit(gen, info)
    _, round_robin, _ = determine_expert_map(2, 0, 8, "round_robin")
    with pytest.raises(LayoutcVllmError, match=r"vLLM's expert_map .* on EP rank 0 differs from contract"):
        ep.expert_map(check.layout(gen), plan, 0, round_robin, "layer", 4)
    with pytest.raises(LayoutcVllmError, match="EP rank 0 holds 3 experts, but contract vllm_cpu_grouped_gemm "
                                               "places 4 on it"):
        ep.expert_map(check.layout(gen), plan, 0, None, "layer", 3)


def test_check_refuses_an_ep_layer_at_load(cpu_moe) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    hook.install("check")
    ex, layer = _layer(cpu_moe, tp=1, experts=4)
    ex.moe_config = SimpleNamespace(**vars(ex.moe_config), ep_size=2, num_experts=8)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    message = str(info.value)
    assert message.startswith("layoutc: layer model.layers.0.mlp.experts: vLLM runs it with expert parallelism "
                              "(ep_size 2, 4 of 8 experts on this rank)"), message
    assert "CPUUnquantizedExperts.apply ignores expert_map" in message, message


# ---- messages (issue 23 item 7) -------------------------------------------------------


@pytest.mark.parametrize("value, holds", [(float("nan"), "the constant NaN"), (1.0, "the constant 1.0")])
def test_check_names_the_experts_and_a_constant_pad(cpu_moe, monkeypatch: pytest.MonkeyPatch, value: float,
                                                    holds: str) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    real = cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate

    def pad_then_fill(self, layer):  # type: ignore[no-untyped-def]
        real(self, layer)
        layer.w13_weight.data[2, 176:192] = value  # one expert's gate pad holds `value`

    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", pad_then_fill)
    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=4)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    message = str(info.value)
    assert "16 of 384 rows wrong, in expert 2 of 4)" in message, message
    assert f"rows 176..191 hold {holds}, where the contract puts pad of gate; {CONTRACT_LINE['tensor w13:']}" \
        in message, message
