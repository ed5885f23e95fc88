"""vLLM's CPU unquantized experts: the loader (RoutedExperts._load_w13/_load_w2) into the
unpadded parameter, then `CPUUnquantizedExperts._pad_moe_intermediate` (and its subclasses per
ISA), against the contract's `shard_w13` / `shard_w2` / `shard_w13_bias`, every rank.
Gate: `<Class>.is_supported_config` (the device probe `_supports_current_device` and the
zentorch probe patched: the gate asked is the grouped-GEMM one).
"""

# Names from the kit's other parts (base.py, vllm_common.py), defined above this text in a kit;
# E, H, I are the field's names.
# ruff: noqa: F821, E741

from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = (
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe:CPUUnquantizedExperts",
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe:X86CPUUnquantizedExperts",
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe:ArmCPUUnquantizedExperts",
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe:PowerCPUUnquantizedExperts",
)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
SHARED = ("vllm_common",)
CPU_MOE = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"
TARGETS = {
    f"{CPU_MOE}:CPUUnquantizedExperts._pad_moe_intermediate": ("self", "layer"),
    f"{CPU_MOE}:CPUUnquantizedExperts.is_supported_config":
        ("cls", "moe_config", "weight_key", "activation_key", "activation_format"),
    "vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts._load_w13":
        ("self", "expert_data", "shard_dim", "shard_id", "loaded_weight", "tp_rank", "load_full"),
    "vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts._load_w2":
        ("self", "expert_data", "shard_dim", "loaded_weight", "tp_rank", "load_full"),
}
# The path's scope (the solver picks inside it): vLLM 0.32 keeps swigluoai unpadded (the contract
# pads its pairs: docs/kernels.md, known "cpu_swigluoai_padded_pairs"); the loader is pure TP.
SCOPE = {"activation": ("silu", "gelu", "gelu_tanh"), "ep_size": (1,)}


def _classes(params: dict[str, Any], gen: Any) -> Any:
    """cpu_moe and the experts class the contract's `models vllm ... when isa == X` line names."""
    import importlib

    return importlib.import_module(CPU_MOE), model_target(gen, params, CPU_MOE)


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk

    cpu_moe, cls = _classes(params, gen)
    try:
        config = vllm_moe_config(num_experts=params["num_experts"], hidden_size=params["hidden_size"],
                                 intermediate_size=params["intermediate_size"], tp_size=params["tp_size"],
                                 activation=params["activation"], dtype=params["dtype"])
    except (AssertionError, ValueError, NotImplementedError):
        return False
    with mock.patch.object(cpu_moe, "is_zentorch_moe_config_supported", return_value=False), \
            mock.patch.object(cls, "_supports_current_device", staticmethod(lambda: True)):
        ok, _ = cls.is_supported_config(cls, config, None, None, mk.FusedMoEActivationFormat.Standard)
    return bool(ok)


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine tensor, the contract tensor's thunk) for every rank."""
    _, cls = _classes(params, gen)
    E, H, I, tp = params["num_experts"], params["hidden_size"], params["intermediate_size"], params["tp_size"]
    td = VLLM_DTYPES[params["dtype"]]
    g = torch.Generator().manual_seed(0)
    w1, w3 = torch.randn(E, I, H, generator=g).to(td), torch.randn(E, I, H, generator=g).to(td)
    w2 = torch.randn(E, H, I, generator=g).to(td)
    bias = torch.randn(E, 2 * I, generator=g).to(td)
    config = vllm_moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                             activation=params["activation"], dtype=params["dtype"], has_bias=True)
    experts = object.__new__(cls)
    experts.moe_config = config  # what _pad_moe_intermediate reads from self
    i_pp = I // tp

    def dest(*shape: int) -> torch.Tensor:
        return poisoned(shape, td) if poison else torch.zeros(shape, dtype=td)

    for rank in range(tp):
        layer = torch.nn.Module()
        w13_p = vllm_load_w13(config, dest(E, 2 * i_pp, H), w1, w3, rank)
        w2_p = vllm_load_w2(config, dest(E, H, i_pp), w2, rank)
        b = torch.zeros(E, 2 * i_pp, dtype=td)
        b[:, :i_pp] = bias[:, rank * i_pp:(rank + 1) * i_pp]
        b[:, i_pp:] = bias[:, I + rank * i_pp:I + (rank + 1) * i_pp]
        layer.w13_weight = torch.nn.Parameter(w13_p, requires_grad=False)
        layer.w2_weight = torch.nn.Parameter(w2_p, requires_grad=False)
        layer.w13_bias = torch.nn.Parameter(b, requires_grad=False)
        experts._pad_moe_intermediate(layer)
        yield f"w13 rank {rank}", layer.w13_weight.data, lambda r=rank: gen.shard_w13(torch.cat([w1, w3], 1), r, plan)
        yield f"w2 rank {rank}", layer.w2_weight.data, lambda r=rank: gen.shard_w2(w2, r, plan)
        yield f"w13_bias rank {rank}", layer.w13_bias.data, lambda r=rank: gen.shard_w13_bias(bias, r, plan)
