"""vLLM adapters shared by the vLLM drivers (copied into each vLLM kit as text) and by the
conformance lane (tests/support/conformance/oracle.py imports them: one copy of each call).

Nothing here re-implements a vLLM rule: each helper builds the inputs a vLLM function takes
(a `FusedMoEConfig`, the `self` its loader reads) and calls the function. Imports vLLM only
inside the functions, so the kit collects (and refuses by name) when vLLM is missing.
"""

import contextlib
import dataclasses
import sys
import types
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch

VLLM_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def vllm_moe_config(*, num_experts: int, hidden_size: int, intermediate_size: int, tp_size: int,
                    activation: str = "silu", dtype: str | torch.dtype = "bfloat16",
                    experts_per_token: int | None = None, **extra: Any) -> Any:
    """vLLM's own FusedMoEConfig for one layer (pure TP, every expert local); `dtype` a name or a
    torch dtype; `experts_per_token` default min(2, num_experts). Raises whatever vLLM raises for an
    ill-formed layer (AssertionError when intermediate_size % tp_size != 0, NotImplementedError for a
    non-gated activation on CPU). Also tests/support/conformance/oracle.py's `moe_config`."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    parallel = dataclasses.replace(FusedMoEParallelConfig.make_no_parallel(), tp_size=tp_size)
    return FusedMoEConfig(
        num_experts=num_experts,
        experts_per_token=min(2, num_experts) if experts_per_token is None else experts_per_token, hidden_dim=hidden_size,
        intermediate_size=intermediate_size, num_local_experts=num_experts, num_logical_experts=num_experts,
        activation=MoEActivation(activation), device="cpu", routing_method=RoutingMethodType.Renormalize,
        moe_parallel_config=parallel, in_dtype=VLLM_DTYPES[dtype] if isinstance(dtype, str) else dtype, **extra)


def _loader_self(config: Any) -> Any:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    return types.SimpleNamespace(moe_config=config, _get_hidden_dim=RoutedExperts._get_hidden_dim,
                                 _narrow_expert_data_for_padding=RoutedExperts._narrow_expert_data_for_padding)


def vllm_load_w13(config: Any, param: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, rank: int) -> torch.Tensor:
    """RoutedExperts._load_w13 of checkpoint w1/w3 [E, I, H] into `param` [E, 2 * I_param, H] for `rank`."""
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    fake = _loader_self(config)
    for e in range(param.shape[0]):
        RoutedExperts._load_w13(fake, expert_data=param[e], shard_dim=0, shard_id="w1", loaded_weight=w1[e],
                                tp_rank=rank)
        RoutedExperts._load_w13(fake, expert_data=param[e], shard_dim=0, shard_id="w3", loaded_weight=w3[e],
                                tp_rank=rank)
    return param


def vllm_load_w2(config: Any, param: torch.Tensor, w2: torch.Tensor, rank: int) -> torch.Tensor:
    """RoutedExperts._load_w2 of checkpoint w2 [E, H, I] into `param` [E, H, I_param] for `rank`."""
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    fake = _loader_self(config)
    for e in range(param.shape[0]):
        RoutedExperts._load_w2(fake, expert_data=param[e], shard_dim=1, loaded_weight=w2[e], tp_rank=rank)
    return param


@contextlib.contextmanager
def vllm_rocm_platform(cdna_version: int = 4) -> Iterator[None]:
    """Make vLLM's ROCm branches reachable on a CPU host: `current_platform.is_rocm()` returns True
    and `vllm.platforms.rocm` is a stub (the real module loads ROCm libraries) for a gfx950 (MI355X,
    CDNA4) device: `get_cdna_version`, `on_gfx950` True, `on_gfx1250` False. Nothing else of the
    platform changes. Also tests/support/conformance/oracle.py's `rocm_platform`."""
    from vllm.platforms import current_platform

    stub = types.ModuleType("vllm.platforms.rocm")
    stub.get_cdna_version = lambda: cdna_version  # type: ignore[attr-defined]
    stub.on_gfx950 = lambda: True  # type: ignore[attr-defined]
    stub.on_gfx1250 = lambda: False  # type: ignore[attr-defined]
    with mock.patch.object(current_platform, "is_rocm", return_value=True), \
            mock.patch.dict(sys.modules, {"vllm.platforms.rocm": stub}):
        yield
