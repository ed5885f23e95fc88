"""vLLM's Marlin MXFP8 MoE weight processing: `marlin_utils_fp8.prepare_mxfp8_moe_layer_for_marlin` itself
on one rank's float8_e4m3fn weights and uint8 E8M0 scales (group 32): its pad (`marlin_moe_padded_intermediate`,
`_moe_pad_shard_rows` per half, `_moe_pad_last`), its FP8-to-int32 packing (`pack_fp8_to_int32`, a view
of each [N, K] weight as [K / 4, N] int32) and its scale transpose to float. The device-only steps are
replaced by the identity and named here: `ops.gptq_marlin_repack` (a CUDA op), `marlin_permute_scales`
and `mxfp8_marlin_process_scales` (the kernel's own re-layout after the pad). What comes back is read
back through those documented views (int32 [K / 4, N] -> bytes [N, K]; float scales [K / 32, N] ->
E8M0 bytes [N, K / 32], exact for E8M0 values) and compared byte for byte with the contract's `pad_*`.
Block FP8 (`prepare_fp8_moe_layer_for_marlin` and its TP loader) is not driven here: `scheme` is
scoped to mxfp8. No gate (`engine_admits` is None: MarlinExperts has no shape gate).
"""

from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = (
    "vllm.model_executor.layers.fused_moe.experts.marlin_moe:MarlinExperts",
    "vllm.model_executor.layers.quantization.fp8:Fp8MoEMethod",
)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
FP8 = "vllm.model_executor.layers.quantization.utils.marlin_utils_fp8"
TARGETS = {
    f"{FP8}:prepare_mxfp8_moe_layer_for_marlin": ("layer", "w13", "w2", "w13_scale", "w2_scale"),
    f"{FP8}:pack_fp8_to_int32": ("fp8_tensor", "size_k_first"),
    f"{FP8}:marlin_permute_scales": None,
    f"{FP8}:mxfp8_marlin_process_scales": ("marlin_scales",),
    "vllm.model_executor.layers.quantization.utils.marlin_utils:marlin_moe_padded_intermediate": None,
}
# the block-FP8 path is another vLLM function with its own TP loader (not driven by this driver)
SCOPE = {"scheme": ("mxfp8",), "scale_dtype": ("uint8",)}


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    return None


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine tensor, the contract tensor's thunk) for one rank's shard."""
    import importlib
    import types

    mod = importlib.import_module(FP8)
    E, H = params["num_experts"], params["hidden_size"]
    i_pp = params["intermediate_size"] // params["tp_size"]
    g = torch.Generator().manual_seed(2)
    w13 = torch.randint(0, 256, (E, 2 * i_pp, H), dtype=torch.uint8, generator=g).view(torch.float8_e4m3fn)
    w2 = torch.randint(0, 256, (E, H, i_pp), dtype=torch.uint8, generator=g).view(torch.float8_e4m3fn)
    s13 = torch.randint(100, 140, (E, 2 * i_pp, H // 32), dtype=torch.uint8, generator=g)
    s2 = torch.randint(100, 140, (E, H, i_pp // 32), dtype=torch.uint8, generator=g)
    ident = lambda t, *a, **k: t  # noqa: E731
    with mock.patch.object(mod.ops, "gptq_marlin_repack", lambda b_q_weight, **k: b_q_weight, create=True), \
            mock.patch.object(mod, "marlin_permute_scales", lambda s, **k: s), \
            mock.patch.object(mod, "mxfp8_marlin_process_scales", ident):
        v13, v2, v13_s, v2_s = mod.prepare_mxfp8_moe_layer_for_marlin(types.SimpleNamespace(), w13.clone(), w2.clone(),
                                                                      s13.clone(), s2.clone())

    def weight_bytes(packed: torch.Tensor) -> torch.Tensor:  # int32 [E, K / 4, N] -> bytes [E, N, K]
        return packed.transpose(1, 2).contiguous().view(torch.uint8)

    def scale_bytes(s: torch.Tensor) -> torch.Tensor:  # float [E, K / 32, N] -> E8M0 bytes [E, N, K / 32]
        return s.transpose(1, 2).contiguous().to(torch.float8_e8m0fnu).view(torch.uint8)

    yield "w13_weight", weight_bytes(v13), lambda: gen.pad_w13_weight(w13, plan).view(torch.uint8)
    yield "w2_weight", weight_bytes(v2), lambda: gen.pad_w2_weight(w2, plan).view(torch.uint8)
    yield "w13_weight_scale", scale_bytes(v13_s), lambda: gen.pad_w13_weight_scale(s13, plan)
    yield "w2_weight_scale", scale_bytes(v2_s), lambda: gen.pad_w2_weight_scale(s2, plan)
