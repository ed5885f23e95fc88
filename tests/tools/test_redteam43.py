"""Red-team findings on issue 43 (W8A8 int8 check), confirmed with vLLM 0.32's own
CompressedTensorsW8A8Int8MoEMethod on CPU tensors (the harness of tests/tools/test_vllm_plugin_int8.py).

1. ZenCPUExpertsInt8 hands zentorch_fused_moe bf16 copies of the biases (`_w1_bias_bf16`,
   `_w2_bias_bf16`, made in its __init__), as it hands it float32 copies of the scales. The plugin
   holds the scale copies (int8.KERNEL_COPIES) but not the bias copies: a kernel bias copy left in
   the loader's [gate | up] halves on a swigluoai (gpt-oss) layer, or zeroed, passes check silently.
2. A tensor whose values equal the contract's but whose dtype differs (a float64 scale where the
   contract stores float32, an int16 w2 where it stores int8) is refused, but the message says
   "0 of 352 rows wrong, in experts  of 4): ;": it names no row, no expert and not the dtype.
3. A kernel scale copy that is missing (`_w1_scale_f32 = None`) was skipped silently.
4. A non-contiguous weight passes at load, then zentorch refuses it at the first forward.
5. The release gate admitted any release some contract models: flashinfer_fp8_moe (a GPU function,
   flashinfer_utils.align_moe_weights_for_fi) models vLLM 0.29.0, so a vllm 0.29.0 install passed the gate
   though no contract models a class the plugin holds in 0.29.0.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.tools.test_vllm_plugin_int8 import E, H, _layer, _zen, w8a8  # noqa: F401  (w8a8: fixture)

pytestmark = [pytest.mark.kernel, pytest.mark.conformance]


def _biased_layer(monkeypatch: pytest.MonkeyPatch, intermediate: int, tp: int, activation: str) -> tuple[Any, Any]:
    """`_layer` with has_bias (gpt-oss): w13_bias / w2_bias created by vLLM's create_weights, seeded values."""
    from tests.support.conformance import oracle

    plain = oracle.moe_config
    monkeypatch.setattr(oracle, "moe_config", lambda **kw: plain(has_bias=True, **kw))
    method, layer = _layer(intermediate, tp, activation, rank=tp - 1)
    g = torch.Generator().manual_seed(1)
    layer.w13_bias.data.copy_(torch.randn(layer.w13_bias.shape, generator=g).to(layer.w13_bias.dtype))
    layer.w2_bias.data.copy_(torch.randn(layer.w2_bias.shape, generator=g).to(layer.w2_bias.dtype))
    return method, layer


def _unpermuted(experts: Any) -> None:
    b = experts._w1_bias_bf16  # interleaved (gate, up) pairs -> the loader's [gate | up] halves
    experts._w1_bias_bf16 = torch.cat([b[:, 0::2], b[:, 1::2]], dim=1).contiguous()


def _zeroed_w2(experts: Any) -> None:
    experts._w2_bias_bf16 = torch.zeros_like(experts._w2_bias_bf16)


@pytest.mark.parametrize(
    "bug, copy",
    [(_unpermuted, "_w1_bias_bf16"), (_zeroed_w2, "_w2_bias_bf16")],
    ids=["w13-bias-copy-not-interleaved", "w2-bias-copy-zeroed"],
)
def test_the_kernels_bias_copy_is_checked_too(
    w8a8: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    bug: Any,
    copy: str,
) -> None:
    """zentorch_fused_moe reads ZenCPUExpertsInt8's bias copies, not the layer's biases
    (cpu_moe.py ZenCPUExpertsInt8.apply); one that differs from the contract's bias must be refused,
    named as what the kernel reads. Found: the layer passes and is counted as held."""
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _biased_layer(monkeypatch, 88, 2, "swigluoai")
    _zen(method)
    init = cpu_moe.ZenCPUExpertsInt8.__init__

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        bug(self)

    monkeypatch.setattr(cpu_moe.ZenCPUExpertsInt8, "__init__", broken)
    hook.install("check")
    with pytest.raises(LayoutcVllmError, match=copy):
        method.process_weights_after_loading(layer)


def test_a_dtype_only_mismatch_is_refused_naming_the_dtype(w8a8, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A float64 w13_weight_scale (same values as the contract's float32) is refused; the message must
    say why (the dtype), not "0 of 352 rows wrong, in experts  of 4): ;"."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_int8 as ct,
    )
    from vllm.model_executor.utils import replace_parameter

    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _layer(176, 1, "silu")
    _zen(method)
    convert = ct.convert_to_int8_moe_kernel_format

    def broken(int8_backend, w13, w2, layer=None, w13_scale=None):  # type: ignore[no-untyped-def]
        replace_parameter(layer, "w13_weight_scale", layer.w13_weight_scale.data.double())
        return convert(int8_backend, w13, w2, layer=layer, w13_scale=layer.w13_weight_scale)

    monkeypatch.setattr(ct, "convert_to_int8_moe_kernel_format", broken)
    hook.install("check")
    with pytest.raises(LayoutcVllmError) as info:
        method.process_weights_after_loading(layer)
    text = str(info.value)
    assert "w13_weight_scale" in text, text
    assert "float64" in text and "float32" in text, text
    assert "0 of 352 rows wrong" not in text, text


def test_a_non_contiguous_weight_is_refused_at_load(w8a8, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """zentorch_fused_moe refuses non-contiguous weights at the first forward ("zentorch_group_matmul:
    weight[0] must be contiguous", measured here); a w13 with the contract's values but transposed
    strides passes check today, is counted as held, and the engine then dies at its first forward."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_int8 as ct,
    )
    from vllm.model_executor.utils import replace_parameter

    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _layer(176, 1, "silu")
    _zen(method)
    convert = ct.convert_to_int8_moe_kernel_format

    def broken(int8_backend, w13, w2, layer=None, w13_scale=None):  # type: ignore[no-untyped-def]
        strided = layer.w13_weight.data.transpose(1, 2).contiguous().transpose(1, 2)
        replace_parameter(layer, "w13_weight", strided)
        return convert(int8_backend, layer.w13_weight, w2, layer=layer, w13_scale=w13_scale)

    monkeypatch.setattr(ct, "convert_to_int8_moe_kernel_format", broken)
    hook.install("check")
    with pytest.raises(LayoutcVllmError, match="w13_weight"):
        method.process_weights_after_loading(layer)


def _no_w1_scale(experts: Any) -> None:
    experts._w1_scale_f32 = None


def test_a_missing_kernel_scale_copy_is_refused_by_name(w8a8, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """ZenCPUExpertsInt8.apply hands zentorch_fused_moe `_w1_scale_f32`; an experts object without it
    (None) must be refused naming the copy. Found: skipped silently, the layer counted as held."""
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _layer(176, 1, "silu")
    _zen(method)
    init = cpu_moe.ZenCPUExpertsInt8.__init__

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _no_w1_scale(self)

    monkeypatch.setattr(cpu_moe.ZenCPUExpertsInt8, "__init__", broken)
    hook.install("check")
    with pytest.raises(LayoutcVllmError, match="_w1_scale_f32"):
        method.process_weights_after_loading(layer)


def test_an_int16_w2_weight_is_refused_naming_the_dtype(w8a8, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """An int16 w2_weight with the int8 values the contract stores is refused naming both dtypes."""
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_int8 as ct,
    )
    from vllm.model_executor.utils import replace_parameter

    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    method, layer = _layer(176, 1, "silu")
    _zen(method)
    convert = ct.convert_to_int8_moe_kernel_format

    def broken(int8_backend, w13, w2, layer=None, w13_scale=None):  # type: ignore[no-untyped-def]
        replace_parameter(layer, "w2_weight", layer.w2_weight.data.to(torch.int16))
        return convert(int8_backend, w13, layer.w2_weight, layer=layer, w13_scale=w13_scale)

    monkeypatch.setattr(ct, "convert_to_int8_moe_kernel_format", broken)
    hook.install("check")
    with pytest.raises(LayoutcVllmError) as info:
        method.process_weights_after_loading(layer)
    text = str(info.value)
    assert "w2_weight" in text and "int16" in text and "int8" in text, text
    assert "rows wrong" not in text, text


def test_a_release_only_gpu_contracts_model_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.29.0 is modelled only by flashinfer_fp8_moe (a GPU function the plugin never holds): install
    refuses it, saying the release. Found: the gate passed it (any contract's release was admitted)."""
    from tests.tools.test_vllm_plugin import _require_vllm

    _require_vllm()
    import vllm

    from layoutc.runtime import models
    from layoutc.tools.vllm_plugin import LayoutcVllmError, hook

    assert models.modelling("vllm", release="0.29.0"), "the premise: some contract models vLLM 0.29.0"
    hook.uninstall()
    monkeypatch.setattr(vllm, "__version__", "0.29.0")
    try:
        with pytest.raises(LayoutcVllmError, match=r"vLLM 0\.29\.0 is not a release") as info:
            hook.install("check")
        assert "0.32.0" in str(info.value), str(info.value)
    finally:
        hook.uninstall()


def test_a_biased_swigluoai_layer_with_the_kernels_own_copies_is_held(w8a8, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The control of the bias-copy test: vLLM's own ZenCPUExpertsInt8 copies of a gpt-oss layer's biases
    (interleaved, bf16) pass the check and the layer is counted as held."""
    from layoutc.tools.vllm_plugin import hook

    method, layer = _biased_layer(monkeypatch, 88, 2, "swigluoai")
    _zen(method)
    hook.install("check")
    method.process_weights_after_loading(layer)
    assert sum(hook.handled().values()) == 1, hook.handled()
    experts = method.moe_kernel.fused_experts
    assert experts._w1_bias_bf16 is not None and experts._w2_bias_bf16 is not None
