"""vLLM's FlashInfer TRT-LLM MXFP8 weight preparation (vLLM 0.33+):
`flashinfer_utils.prepare_fp8_moe_layer_for_fi(layer, ..., is_trtllm=True)` on one rank's
float8_e4m3fn weights and uint8 UE8M0 block scales (weight_block_size [1, 32]): it runs
`align_mxfp8_moe_weights_for_fi_trtllm` (min_alignment 128, hidden_alignment 256) then
`swap_w13_to_w31`, and sets the layer's padded sizes. The device-only step is the kernel's tile
shuffle `_shuffle_mxfp8_moe_weights` (a permutation the kernel inverts), replaced by the identity and
named here. Against the contract's `pad_*` of the same [gate | up] shard (the contract states w13 as
[up | gate] halves). No gate: the helper takes none (`engine_admits` is None).
"""

from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = ("vllm.model_executor.layers.quantization.utils.flashinfer_utils:align_mxfp8_moe_weights_for_fi_trtllm",)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
# vLLM 0.33+ on a host without CUDA: the CPU experts first (the platform and custom-op registry), then
# fused_moe (flashinfer_utils imports it back).
PRELOAD = ("vllm.model_executor.layers.fused_moe.experts.cpu_moe", "vllm.model_executor.layers.fused_moe")
FI = "vllm.model_executor.layers.quantization.utils.flashinfer_utils"
TARGETS = {
    f"{FI}:prepare_fp8_moe_layer_for_fi": None,
    f"{FI}:align_mxfp8_moe_weights_for_fi_trtllm":
        ("w13", "w2", "w13_scale", "w2_scale", "is_act_and_mul", "min_alignment", "hidden_alignment"),
    f"{FI}:swap_w13_to_w31": ("x",),
    f"{FI}:_shuffle_mxfp8_moe_weights": None,
}


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    return None


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine value, the contract value's thunk): the padded sizes, then one rank's tensors."""
    import importlib
    import types

    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    fi = importlib.import_module(FI)
    E, H = params["num_experts"], params["hidden_size"]
    i_pp = params["intermediate_size"] // params["tp_size"]
    g = torch.Generator().manual_seed(0)
    w13 = torch.randint(0, 256, (E, 2 * i_pp, H), dtype=torch.uint8, generator=g).view(torch.float8_e4m3fn)
    w2 = torch.randint(0, 256, (E, H, i_pp), dtype=torch.uint8, generator=g).view(torch.float8_e4m3fn)
    s13 = torch.randint(100, 140, (E, 2 * i_pp, H // 32), dtype=torch.uint8, generator=g)
    s2 = torch.randint(100, 140, (E, H, i_pp // 32), dtype=torch.uint8, generator=g)
    config = types.SimpleNamespace(is_act_and_mul=True, intermediate_size_per_partition=i_pp, hidden_dim=H)
    layer = types.SimpleNamespace(moe_config=config, weight_block_size=[1, 32], activation=MoEActivation.SILU)
    keep = lambda a, b, c, d, gated: (a, b, c, d)  # noqa: E731  (the kernel's tile shuffle, named above)
    with mock.patch.object(fi, "_shuffle_mxfp8_moe_weights", side_effect=keep):
        p13, p2, ps13, ps2 = fi.prepare_fp8_moe_layer_for_fi(layer, w13.clone(), w2.clone(), s13.clone(), None,
                                                             s2.clone(), None, is_trtllm=True)

    def up_gate(t: torch.Tensor) -> torch.Tensor:  # the contract's logical [up | gate] input
        return torch.cat([t[:, i_pp:], t[:, :i_pp]], 1)

    yield "padded intermediate", torch.tensor([config.intermediate_size_per_partition]), \
        lambda: torch.tensor([plan.intermediate_size_per_partition_padded])
    yield "padded hidden", torch.tensor([config.hidden_dim]), lambda: torch.tensor([plan.hidden_size_padded])
    yield "w13_weight", p13.view(torch.uint8), lambda: gen.pad_w13_weight(up_gate(w13), plan).view(torch.uint8)
    yield "w13_weight_scale", ps13, lambda: gen.pad_w13_weight_scale(up_gate(s13), plan)
    yield "w2_weight", p2.view(torch.uint8), lambda: gen.pad_w2_weight(w2, plan).view(torch.uint8)
    yield "w2_weight_scale", ps2, lambda: gen.pad_w2_weight_scale(s2, plan)
