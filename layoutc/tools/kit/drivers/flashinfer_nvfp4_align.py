"""vLLM's FlashInfer TRT-LLM NVFP4 weight preparation, in `prepare_nvfp4_moe_layer_for_fi_or_cutlass`'s
order: `flashinfer_fp4_moe.reorder_w1w3_to_w3w1`, `flashinfer_utils.align_fp4_moe_hidden_dim_for_fi`
(min_alignment 256), `flashinfer_utils.align_fp4_moe_weights_for_fi` (is_act_and_mul, min_alignment 64),
on one rank's packed uint8 weights and float8_e4m3fn block scales, against the contract's
`pad_w13_weight` / `pad_w13_weight_scale` / `pad_w2_weight` / `pad_w2_weight_scale` of the same
[gate | up] shard (the contract states w13 as [up | gate] halves). The helpers take no gate:
`engine_admits` is None, so refused configurations hold the contract's refusal only.
"""

from typing import Any

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = ("vllm.model_executor.layers.quantization.modelopt:ModelOptNvFp4FusedMoE",)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
# flashinfer_utils imports fused_moe, which imports flashinfer_utils back: fused_moe first.
PRELOAD = ("vllm.model_executor.layers.fused_moe",)
FI = "vllm.model_executor.layers.quantization.utils.flashinfer_utils"
TARGETS = {
    f"{FI}:align_fp4_moe_hidden_dim_for_fi": ("w13", "w13_scale", "w2", "w2_scale", "min_alignment"),
    f"{FI}:align_fp4_moe_weights_for_fi": ("w13", "w13_scale", "w2", "w2_scale", "is_act_and_mul", "min_alignment"),
    "vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe:reorder_w1w3_to_w3w1": None,
}


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    return None


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine tensor, the contract tensor's thunk) for one rank's shard."""
    import importlib

    fi = importlib.import_module(FI)
    fi4 = importlib.import_module("vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe")
    E, H = params["num_experts"], params["hidden_size"]
    i_pp = params["intermediate_size"] // params["tp_size"]
    g = torch.Generator().manual_seed(0)
    w13 = torch.randint(0, 256, (E, 2 * i_pp, H // 2), dtype=torch.uint8, generator=g)  # [w1=gate | w3=up]
    s13 = torch.randn(E, 2 * i_pp, H // 16, generator=g).to(torch.float8_e4m3fn)
    w2 = torch.randint(0, 256, (E, H, i_pp // 2), dtype=torch.uint8, generator=g)
    s2 = torch.randn(E, H, i_pp // 16, generator=g).to(torch.float8_e4m3fn)
    r13, rs13 = fi4.reorder_w1w3_to_w3w1(w13.clone(), s13.clone())
    r13, rs13, p2, ps2, _ = fi.align_fp4_moe_hidden_dim_for_fi(r13, rs13, w2.clone(), s2.clone(), min_alignment=256)
    p13, ps13, p2, ps2, _ = fi.align_fp4_moe_weights_for_fi(r13, rs13, p2, ps2, is_act_and_mul=True, min_alignment=64)

    def up_gate(t: torch.Tensor) -> torch.Tensor:  # the contract's logical [up | gate] input
        return torch.cat([t[:, i_pp:], t[:, :i_pp]], 1)

    yield "w13_weight", p13, lambda: gen.pad_w13_weight(up_gate(w13), plan)
    yield "w13_weight_scale", ps13.view(torch.uint8), \
        lambda: gen.pad_w13_weight_scale(up_gate(s13), plan).view(torch.uint8)
    yield "w2_weight", p2, lambda: gen.pad_w2_weight(w2, plan)
    yield "w2_weight_scale", ps2.view(torch.uint8), lambda: gen.pad_w2_weight_scale(s2, plan).view(torch.uint8)
