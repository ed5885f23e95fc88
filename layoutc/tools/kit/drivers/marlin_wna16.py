"""vLLM's Marlin WNA16 (GPTQ int4) MoE weight processing: `oracle/int_wna16.py::_process_weights_marlin`
itself, on one rank's K-first qweight / scales / qzeros / bias, against the contract's `pad_*`.
The device-only steps are replaced by the identity before the path runs, and named here:
`ops.gptq_marlin_moe_repack` (a CUDA op), `marlin_moe_permute_scales`,
`moe_packed_to_marlin_zero_points`, `marlin_permute_bias` (the kernel's own re-layout after the pad),
so what comes back is vLLM's padded tensor. Gate: `_backend_incompatibility_reason(MARLIN, config,
AutoGPTQConfig(4 bits, group_size, desc_act=act_order), zp False, bias True, tile padding True)`.
"""

# Names from the kit's other parts (base.py, vllm_common.py), defined above this text in a kit;
# ruff: noqa: F821

from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = (
    "vllm.model_executor.layers.fused_moe.experts.marlin_moe:MarlinExperts",
    "vllm.model_executor.layers.quantization.auto_gptq:AutoGPTQMoEMethod",
)
# ... and whose `route` lines serve these checkpoint formats (MarlinExperts and AutoGPTQMoEMethod
# also stand for GPTQ int8; this path is the int4 one).
SERVES = ("gptq_int4",)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
SHARED = ("vllm_common",)
WNA16 = "vllm.model_executor.layers.fused_moe.oracle.int_wna16"
TARGETS = {
    f"{WNA16}:_process_weights_marlin": ("layer", "input_dtype", "num_bits", "pack_factor", "group_size",
                                         "w13_qweight", "w2_qweight", "w13_scales", "w2_scales", "w13_qzeros",
                                         "w2_qzeros", "w13_bias", "w2_bias"),
    f"{WNA16}:_backend_incompatibility_reason":
        ("backend", "moe_config", "quant_config", "may_have_zp", "may_have_bias", "allow_tile_padding"),
    "vllm.model_executor.layers.quantization.utils.marlin_utils:marlin_moe_padded_intermediate": None,
}


def known(params: dict[str, Any]) -> str | None:
    """A documented disagreement (docs/kernels.md; tests/support/conformance/known.py): vLLM admits a
    channelwise int4 shard the packed checkpoint cannot be cut into."""
    if params["group_size"] == -1 and (params["intermediate_size"] // params["tp_size"]) % 8:
        return "gptq_int4_channelwise_ipp_not_8 (a vLLM bug: the packed qzeros cannot be cut at this shard)"
    return None


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    import importlib

    from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig

    mod = importlib.import_module(WNA16)
    try:
        config = vllm_moe_config(num_experts=params["num_experts"], hidden_size=params["hidden_size"],
                                 intermediate_size=params["intermediate_size"], tp_size=params["tp_size"],
                                 activation=params["activation"], dtype=params["dtype"])
        quant = AutoGPTQConfig(weight_bits=4, group_size=params["group_size"], desc_act=params["act_order"],
                               is_sym=True, lm_head_quantized=False, dynamic={}, full_config={})
    except (AssertionError, ValueError, NotImplementedError):
        return False
    return mod._backend_incompatibility_reason(mod.WNA16MoEBackend.MARLIN, config, quant, False, True, True) is None


def _rand_int32(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32, generator=g)


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine tensor, the contract tensor's thunk) for one rank's shard."""
    import importlib
    import types

    mod = importlib.import_module(WNA16)
    E, H, gs = params["num_experts"], params["hidden_size"], params["group_size"]
    i_pp = params["intermediate_size"] // params["tp_size"]
    pf, dt = 8, VLLM_DTYPES[params["dtype"]]
    G13, G2 = (1, 1) if gs == -1 else (H // gs, i_pp // gs)
    g = torch.Generator().manual_seed(1)
    w13_q, w2_q = _rand_int32(g, E, H // pf, 2 * i_pp), _rand_int32(g, E, i_pp // pf, H)
    w13_s, w2_s = torch.randn(E, G13, 2 * i_pp, generator=g).to(dt), torch.randn(E, G2, H, generator=g).to(dt)
    w13_z, w2_z = _rand_int32(g, E, G13, 2 * i_pp // pf), _rand_int32(g, E, G2, H // pf)
    w13_b, w2_b = torch.randn(E, 2 * i_pp, generator=g).to(dt), torch.randn(E, H, generator=g).to(dt)
    layer = types.SimpleNamespace(intermediate_size_per_partition=i_pp, num_groups_w13=G13, num_groups_w2=G2)
    ident = lambda t, *a, **k: t  # noqa: E731
    patches = [mock.patch.object(mod.ops, "gptq_marlin_moe_repack", ident, create=True),
               mock.patch.object(mod, "marlin_moe_permute_scales", lambda s, **k: s),
               mock.patch.object(mod, "moe_packed_to_marlin_zero_points", lambda z, **k: z),
               mock.patch.object(mod, "marlin_permute_bias", lambda b: b)]
    with patches[0], patches[1], patches[2], patches[3]:
        out = mod._process_weights_marlin(layer, None, 4, pf, gs, w13_q.transpose(1, 2), w2_q.transpose(1, 2),
                                          w13_s.transpose(1, 2), w2_s.transpose(1, 2), w13_z.transpose(1, 2),
                                          w2_z.transpose(1, 2), w13_b, w2_b)
    v13_q, v2_q, v13_s, v2_s, v13_z, v2_z, _, _, v13_b, v2_b = out
    yield "w13_qweight", v13_q, lambda: gen.pad_w13_qweight(w13_q, plan)
    yield "w2_qweight", v2_q, lambda: gen.pad_w2_qweight(w2_q, plan)
    yield "w13_scales", v13_s, lambda: gen.pad_w13_scales(w13_s, plan)
    yield "w2_scales", v2_s, lambda: gen.pad_w2_scales(w2_s, plan)
    yield "w13_qzeros", v13_z, lambda: gen.pad_w13_qzeros(w13_z, plan)
    yield "w2_qzeros", v2_z, lambda: gen.pad_w2_qzeros(w2_z, plan)
    yield "w13_bias", v13_b, lambda: gen.pad_w13_bias(w13_b, plan)
    yield "w2_bias", v2_b, lambda: gen.pad_w2_bias(w2_b, plan)
