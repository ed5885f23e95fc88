"""The plugin on vLLM's AMX int8 experts, CPUExpertsInt8, without an engine (issue 43 item 2).

Oracle: vLLM 0.32's real `CompressedTensorsW8A8Int8MoEMethod` (create_weights, `RoutedExperts.weight_loader`,
process_weights_after_loading, which builds the modular kernel and calls
`CPUExpertsInt8.process_weights_after_loading`, the VNNI repack `torch.ops._C.convert_weight_packed` on
w13_weight and w2_weight). This CPU has no AMX tiles, so two things stand in: the class's
`_supports_current_device` answers True (x86 + `torch.cpu._is_amx_tile_supported()` in vLLM) so vLLM's own
backend choice picks CPUExpertsInt8, and the op `_C::convert_weight_packed` is replaced by a stand-in that
records its input and returns it. The plugin holds the layer's tensors to `vllm_cpu_int8_moe` (isa amx) as
they reach that op. The engine test is `test_cpu_int8_amx_engine_is_held` (skips without amx_tile).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.conftest import contract_line
from tests.tools.test_vllm_plugin_int8 import _layer

pytestmark = [pytest.mark.kernel, pytest.mark.conformance]

OP = "convert_weight_packed"  # _C::convert_weight_packed, CPUExpertsInt8.process_weights_after_loading
CONTRACT = "vllm_cpu_int8_moe"
INTER = 128  # CPUExpertsInt8.is_supported_config: hidden and intermediate % 32


@pytest.fixture
def w8a8():  # type: ignore[no-untyped-def]
    """vLLM's config context, the plugin off before and after (as tests/tools/test_vllm_plugin_int8.py's fixture)."""
    from vllm.config import VllmConfig, set_current_vllm_config

    from layoutc.tools.vllm_plugin import hook

    hook.uninstall()
    with set_current_vllm_config(VllmConfig()):
        yield
    hook.uninstall()


@pytest.fixture
def amx(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """CPUExpertsInt8 picked by vLLM's backend choice, and the op's inputs as they reach the stand-in."""
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    monkeypatch.setattr(cpu_moe.ZenCPUExpertsInt8, "_supports_current_device", staticmethod(lambda: False))
    monkeypatch.setattr(cpu_moe.CPUExpertsInt8, "_supports_current_device", staticmethod(lambda: True))
    seen: list[torch.Tensor] = []

    def convert_weight_packed(weight: torch.Tensor) -> torch.Tensor:
        seen.append(weight.detach().clone())
        return weight.detach().clone()

    monkeypatch.setattr(torch.ops._C, OP, convert_weight_packed)
    return seen


def _method(tp: int = 1) -> tuple[Any, Any]:
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    method, layer = _layer(INTER, tp, "silu", rank=tp - 1)
    assert method.experts_cls is cpu_moe.CPUExpertsInt8, method.experts_cls
    return method, layer


@pytest.mark.parametrize("mode", ["check", "replace"])
@pytest.mark.parametrize("tp", [1, 2])
def test_cpu_int8_amx_is_held_before_its_repack(w8a8, amx, mode: str, tp: int) -> None:  # type: ignore[no-untyped-def]
    """vLLM's own processing passes, the layer counted against vllm_cpu_int8_moe, and the op got exactly the
    loaded weights (nothing moved before the repack); the summary names no layer not held."""
    from layoutc.tools.vllm_plugin import hook, survey

    method, layer = _method(tp)
    loaded13, loaded2 = layer.w13_weight.detach().clone(), layer.w2_weight.detach().clone()
    hook.install(mode)
    method.process_weights_after_loading(layer)
    assert hook.handled() == {CONTRACT: 1}
    assert len(amx) == 2 and torch.equal(amx[0], loaded13) and torch.equal(amx[1], loaded2)
    model = torch.nn.Module()
    model.experts = layer
    assert survey.not_held(model, hook._STATE["held"]) == []


def _pad_one_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The W8A8 conversion padding I 128 -> 160 (a tile of 32 too many), zeros in the weights, ones in the
    scales: vLLM 0.33's CPU int8 padding where 0.32's rule pads nothing."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_int8 as ct,
    )
    from vllm.model_executor.utils import replace_parameter

    convert = ct.convert_to_int8_moe_kernel_format

    def broken(int8_backend, w13, w2, layer=None, w13_scale=None):  # type: ignore[no-untyped-def]
        def halves(t: torch.Tensor, fill: float) -> torch.Tensor:
            new = t.new_full((t.shape[0], 2 * (INTER + 32), *t.shape[2:]), fill)
            new[:, :INTER], new[:, INTER + 32 : 2 * INTER + 32] = t[:, :INTER], t[:, INTER:]
            return new

        replace_parameter(layer, "w13_weight_scale", halves(layer.w13_weight_scale.data, 1.0))
        w13, w2 = halves(w13.data, 0), torch.nn.functional.pad(w2.data, (0, 32))
        return convert(int8_backend, w13, w2, layer=layer, w13_scale=layer.w13_weight_scale)

    monkeypatch.setattr(ct, "convert_to_int8_moe_kernel_format", broken)


@pytest.mark.parametrize(
    "kind, needles",
    [
        (
            "w8a8_scale_swap",
            [
                f"w13_weight_scale is not laid out as contract {CONTRACT} says",
                "256 of 256 rows wrong, in experts 0..3 of 4",
                "rows 0..127 hold up[0..127], where the contract puts gate[0..127]",
                "tensor w13_weight_scale:",
            ],
        ),
        (
            "w8a8_scale_expert",
            [
                f"w13_weight_scale is not laid out as contract {CONTRACT} says",
                "3 of 256 rows wrong, in expert 3 of 4",
                "rows 5..7 hold the constant 1.0, where the contract puts gate[5..7]",
                "tensor w13_weight_scale:",
            ],
        ),
        (
            "pad_one_tile",
            [
                f"w13_weight has shape (4, 320, 64), but contract {CONTRACT} lays it out as (4, 256, 64)",
                "in experts 0..3 of 4: axis n (halves) holds 2 x 160 rows where the contract "
                "puts 2 x 128 (128 live + 0 pad), 32 rows of pad too many per segment",
                "tensor w13_weight:",
            ],
        ),
    ],
)
def test_cpu_int8_amx_refuses_a_planted_bug_before_the_repack(
    w8a8, amx, monkeypatch: pytest.MonkeyPatch, kind: str, needles: list[str]
) -> None:  # type: ignore[no-untyped-def]
    """The bug is refused by name (layer, tensor, experts, rows, value, contract line), and the repacking op
    never runs on the wrong tensors."""
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _method()
    if kind == "pad_one_tile":
        _pad_one_tile(monkeypatch)
    else:
        from tests.tools.test_vllm_plugin_int8 import _break

        _break(monkeypatch, kind)
    hook.install("check")
    with pytest.raises(LayoutcVllmError) as info:
        method.process_weights_after_loading(layer)
    text = str(info.value)
    assert text.startswith("layoutc: layer model.layers.0.mlp.experts: "), text
    for needle in needles:
        if needle.startswith("tensor "):
            needle = contract_line(CONTRACT, needle)
        assert needle in text, (needle, text)
    assert amx == [], f"_C::{OP} ran on tensors the contract refused"


def test_an_amx_layer_whose_repack_never_ran_is_refused(w8a8, amx, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Where vLLM's method built CPUExpertsInt8 but never called its repack, the plugin says the layer was not
    checked, rather than counting it."""
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _method()
    hook.install("check")
    monkeypatch.setattr(cpu_moe.CPUExpertsInt8, "process_weights_after_loading", lambda self, layer: None)
    with pytest.raises(LayoutcVllmError, match=r"did not call CPUExpertsInt8\.process_weights_after_loading"):
        method.process_weights_after_loading(layer)
    assert hook.handled() == {}
