"""The plugin's check mode compares vLLM's prepacked weights a block of experts at a time (issue 44
item 4: the check's share of the engine load at real width, and its memory).

Oracle: vLLM 0.32's real `CPUUnquantizedExperts.process_weights_after_loading` and the real
`_C::prepack_moe_weight`, as in tests/tools/test_vllm_plugin.py.

- The blocked comparison rests on `_C::prepack_moe_weight` re-blocking each expert on its own: the
  kernel's prepack of a layer is its prepack of each block of experts, stacked (checked here on
  the kernel itself, for the block sizes check.py takes).
- A difference in any one expert is still stopped and described, in the first block, a middle
  one and the last one (a block loop that skipped one would pass it); the layer takes more than
  one block (12 experts, blocks of 6).
"""

from __future__ import annotations

import pytest
import torch

from tests.tools.test_vllm_plugin import _layer, cpu_moe  # noqa: F401  (the fixture, by name)

pytestmark = [pytest.mark.kernel, pytest.mark.conformance]


def test_the_kernels_prepack_of_a_layer_is_its_prepack_per_block(cpu_moe) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    import importlib

    from layoutc.tools.vllm_plugin import check

    gen = importlib.import_module("layoutc_generated.vllm_cpu_grouped_gemm")
    lay = check.layout(gen)
    experts = 12
    plan = lay.plan(num_experts=experts, hidden_size=256, intermediate_size=704, tp_size=4, activation="silu",
                    dtype=torch.bfloat16, isa="vec")
    torch.manual_seed(0)
    w13 = torch.randn(tuple(lay.weight("w13").shapes(plan)[1])).to(torch.bfloat16)
    w2 = torch.randn(tuple(lay.weight("w2").shapes(plan)[1])).to(torch.bfloat16)
    whole13, whole2 = check.kernel(gen).prepack_padded(w13, w2, plan)
    for block in (1, 4, 6):
        sub = lay.replan(plan, num_experts=block)
        for lo in range(0, experts, block):
            p13, p2 = check.kernel(gen).prepack_padded(w13[lo:lo + block].contiguous(),
                                                       w2[lo:lo + block].contiguous(), sub)
            assert torch.equal(p13.data, whole13.data[lo:lo + block]), (block, lo)
            assert torch.equal(p2.data, whole2.data[lo:lo + block]), (block, lo)


@pytest.mark.parametrize("expert", [0, 7, 11])
@pytest.mark.parametrize("projection", ["w13", "w2"])
def test_a_wrong_expert_in_any_block_is_stopped(cpu_moe, monkeypatch: pytest.MonkeyPatch, expert: int,  # noqa: F811
                                                projection: str) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, check, hook

    real = cpu_moe.CPUUnquantizedExperts._pad_moe_intermediate

    def pad_then_spoil(self, layer):  # type: ignore[no-untyped-def]
        real(self, layer)
        w = getattr(layer, f"{projection}_weight").data
        if projection == "w13":
            w[expert, 176:192] = 7.0  # gate's pad rows
        else:
            w[expert, :, 176:192] = 7.0  # the pad columns

    monkeypatch.setattr(cpu_moe.CPUUnquantizedExperts, "_pad_moe_intermediate", pad_then_spoil)
    assert 12 % check.BLOCK_EXPERTS and check.BLOCK_EXPERTS < 12  # more than one block, of 6
    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=12)
    with pytest.raises(LayoutcVllmError) as info:
        ex.process_weights_after_loading(layer)
    message = str(info.value)
    assert f"{projection} is not laid out as contract vllm_cpu_grouped_gemm says" in message, message
    assert f"in expert {expert} of 12)" in message, message


def test_vllms_own_padding_passes_over_several_blocks(cpu_moe) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    from layoutc.tools.vllm_plugin import hook

    hook.install("check")
    ex, layer = _layer(cpu_moe, experts=12, bias=True)
    ex.process_weights_after_loading(layer)
    assert hook.handled() == {"vllm_cpu_grouped_gemm": 1}
