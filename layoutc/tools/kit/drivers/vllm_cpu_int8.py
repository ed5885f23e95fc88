"""vLLM's CPU int8 (W8A8) experts: int8 weights through `RoutedExperts._load_w13` / `_load_w2` and
per-channel float32 scales through `RoutedExperts._load_per_channel_weight_scale`, every rank, against
the contract's `shard_w13_weight` / `shard_w2_weight` / `shard_w13_weight_scale` / `shard_w2_weight_scale`.
vLLM 0.32 pads nothing for int8: the admitted classes are aligned, and the sensitive part is the
refusals, which `CPUExpertsInt8` / `ArmCPUExpertsInt8` / `PowerCPUExpertsInt8` `.is_supported_config`
(kInt8StaticChannelSym, kInt8DynamicTokenSym; `_supports_current_device` patched) must share.
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
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe:CPUExpertsInt8",
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe:ArmCPUExpertsInt8",
    "vllm.model_executor.layers.fused_moe.experts.cpu_moe:PowerCPUExpertsInt8",
)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
SHARED = ("vllm_common",)
CPU_MOE = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"
ROUTED = "vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts"
TARGETS = {
    f"{CPU_MOE}:CPUExpertsInt8.is_supported_config":
        ("cls", "moe_config", "weight_key", "activation_key", "activation_format"),
    f"{ROUTED}._load_w13": ("self", "expert_data", "shard_dim", "shard_id", "loaded_weight", "tp_rank", "load_full"),
    f"{ROUTED}._load_w2": ("self", "expert_data", "shard_dim", "loaded_weight", "tp_rank", "load_full"),
    f"{ROUTED}._load_per_channel_weight_scale":
        ("self", "expert_data", "shard_dim", "shard_id", "loaded_weight", "tp_rank"),
}


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    import importlib

    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    importlib.import_module(CPU_MOE)
    cls = model_target(gen, params, CPU_MOE)  # the class the contract's `models vllm ... when isa == X` names
    try:
        config = vllm_moe_config(num_experts=params["num_experts"], hidden_size=params["hidden_size"],
                                 intermediate_size=params["intermediate_size"], tp_size=params["tp_size"],
                                 activation=params["activation"], dtype=params["dtype"])
    except (AssertionError, ValueError, NotImplementedError):
        return False
    with mock.patch.object(cls, "_supports_current_device", staticmethod(lambda: True)):
        ok, _ = cls.is_supported_config(cls, config, qu.kInt8StaticChannelSym, qu.kInt8DynamicTokenSym,
                                        mk.FusedMoEActivationFormat.Standard)
    return bool(ok)


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine tensor, the contract tensor's thunk) for every rank."""
    import types

    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    E, H, I, tp = params["num_experts"], params["hidden_size"], params["intermediate_size"], params["tp_size"]
    g = torch.Generator().manual_seed(0)
    w1 = torch.randint(-128, 128, (E, I, H), dtype=torch.int8, generator=g)
    w3 = torch.randint(-128, 128, (E, I, H), dtype=torch.int8, generator=g)
    w2 = torch.randint(-128, 128, (E, H, I), dtype=torch.int8, generator=g)
    s1, s3, s2 = (torch.rand(E, n, 1, generator=g) for n in (I, I, H))
    config = vllm_moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                             activation=params["activation"], dtype=params["dtype"])
    fake: Any = types.SimpleNamespace(moe_config=config, _get_hidden_dim=RoutedExperts._get_hidden_dim,
                                      _narrow_expert_data_for_padding=RoutedExperts._narrow_expert_data_for_padding)
    fake._load_w13 = lambda **kw: RoutedExperts._load_w13(fake, **kw)
    i_pp = plan.intermediate_size_per_partition_padded

    def dest(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return poisoned(shape, dtype) if poison else torch.zeros(shape, dtype=dtype)

    for rank in range(tp):
        w13_p = vllm_load_w13(config, dest((E, 2 * i_pp, H), torch.int8), w1, w3, rank)
        w2_p = vllm_load_w2(config, dest((E, H, i_pp), torch.int8), w2, rank)
        s13_p, s2_p = dest((E, 2 * i_pp, 1), torch.float32), dest((E, H, 1), torch.float32)
        for e in range(E):
            for shard_id, src in (("w1", s1), ("w3", s3)):
                RoutedExperts._load_per_channel_weight_scale(fake, expert_data=s13_p[e], shard_dim=0,
                                                             shard_id=shard_id, loaded_weight=src[e], tp_rank=rank)
            RoutedExperts._load_per_channel_weight_scale(fake, expert_data=s2_p[e], shard_dim=1, shard_id="w2",
                                                         loaded_weight=s2[e], tp_rank=rank)
        yield f"w13_weight rank {rank}", w13_p, lambda r=rank: gen.shard_w13_weight(torch.cat([w1, w3], 1), r, plan)
        yield f"w2_weight rank {rank}", w2_p, lambda r=rank: gen.shard_w2_weight(w2, r, plan)
        yield f"w13_weight_scale rank {rank}", s13_p, \
            lambda r=rank: gen.shard_w13_weight_scale(torch.cat([s1, s3], 1), r, plan)
        yield f"w2_weight_scale rank {rank}", s2_p, lambda r=rank: gen.shard_w2_weight_scale(s2, r, plan)
