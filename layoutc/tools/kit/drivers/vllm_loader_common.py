"""vLLM's own MoE weight-loading path on a bare module (copied into a kit as text; imported by
the bug replay's block-FP8 driver): a quant method's `create_weights`, `RoutedExperts.weight_loader`
one expert and projection at a time, then `process_weights_after_loading` up to its first
device-only op, which is replaced by a stop that records what it was handed.

Nothing here re-implements a vLLM rule: `routed_experts_stub` copies RoutedExperts' own loading
methods onto a torch module (RoutedExperts.__init__ needs an engine config and a device) with the
attributes they read; the loading and the processing are vLLM's. The same stub as the conformance
lane's `tests/support/conformance/oracle.py::routed_experts_stub`. Imports vLLM only inside the functions.
"""

import copy
import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch

#: RoutedExperts' loading methods, taken as they are (as descriptors) onto the bare module
LOADER_METHODS = ("weight_loader", "_load_w13", "_load_w2", "_load_model_weight_or_group_weight_scale",
                  "_load_per_channel_weight_scale", "_load_per_tensor_weight_scale", "_load_combined_w13_weight_scale",
                  "_load_single_value", "_get_hidden_dim", "_narrow_expert_data_for_padding", "_to_scalar",
                  "_orient_fused_weight")


def routed_experts_stub(config: Any, quant_config: Any, quant_method: Any) -> torch.nn.Module:
    """A torch module carrying vLLM's own `RoutedExperts` loading methods (those of LOADER_METHODS
    the release has) and the attributes they read: `moe_config` (its tp_rank and tp_size are the
    rank's), `quant_config`, `quant_method` (its class name picks the loader branch), no fused shared
    experts, an identity expert map (pure TP; 0.34's `expert_map_manager` likewise). `quant_method.create_weights(stub, ...)` registers the
    method's parameters on it."""
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    methods = {n: RoutedExperts.__dict__[n] for n in LOADER_METHODS if n in RoutedExperts.__dict__}
    layer = type("RoutedExpertsLoader", (torch.nn.Module,), methods)()
    layer.moe_config = config
    layer.quant_config = quant_config
    layer.quant_method = quant_method
    layer._fused_shared_expert_quantizer = None
    layer._loaded_expert_biases = set()
    layer._map_global_expert_id_to_local_expert_id = lambda expert_id: expert_id
    # vLLM 0.34's loader reads the expert map manager and an online shared-expert loader (none here)
    layer.expert_map_manager = types.SimpleNamespace(num_fused_shared_experts=0,
                                                     map_global_to_local=lambda expert_id: expert_id)
    layer.shared_expert_online_loader = None
    layer.intermediate_size_per_partition = config.intermediate_size_per_partition
    layer.hidden_size = config.hidden_dim
    return layer


def rank_config(config: Any, rank: int) -> Any:
    """`config` (a FusedMoEConfig) as TP rank `rank` sees it: a shallow copy, so what vLLM set on it
    after __post_init__ (block-FP8 TP-shard padding: tp_shard_with_padding and the rounded
    intermediate_size_per_partition) is kept."""
    ranked = copy.copy(config)
    ranked.moe_parallel_config = dataclasses.replace(config.moe_parallel_config, tp_rank=rank)
    return ranked


def load_experts(layer: torch.nn.Module, checkpoint: dict[str, dict[str, list[torch.Tensor]]]) -> None:
    """Feed `checkpoint[param][shard_id][e]` (shard_id "w1" gate, "w3" up, "w2" down) through the
    layer's `weight_loader`, as a model's load_weights does after make_expert_params_mapping."""
    for param_name, shards in checkpoint.items():
        param = getattr(layer, param_name)
        for shard_id, per_expert in shards.items():
            for e, tensor in enumerate(per_expert):
                layer.weight_loader(param, tensor, f"model.layers.0.mlp.experts.{param_name}", shard_id, e)


class StoppedAt(Exception):
    """Raised in place of a device-only op: `op` names it; `frames` are the locals of the frames
    that called it (the caller first)."""

    def __init__(self, op: str, frames: list[dict[str, Any]]) -> None:
        super().__init__(f"stopped at {op}")
        self.op, self.frames = op, frames


def run_until(fn: Callable[[], Any], owner: Any, op: str) -> StoppedAt:
    """Run `fn` until it calls `owner.<op>` (a device-only op, never executed: replaced by a stop).
    Raises AssertionError naming the op when `fn` returns without reaching it."""

    def stop(*args: Any, **kwargs: Any) -> None:
        frames, frame = [], inspect.currentframe()
        while frame is not None and frame.f_back is not None and len(frames) < 4:
            frame = frame.f_back
            frames.append(dict(frame.f_locals))
        raise StoppedAt(op, frames)

    with mock.patch.object(owner, op, stop, create=True):
        try:
            fn()
        except StoppedAt as stopped:
            return stopped
    raise AssertionError(f"the path returned without reaching {op}, where this check stops")
