"""Thin adapters that call vLLM 0.32's own functions for the conformance lane.

Nothing here re-implements a vLLM rule: each helper builds the inputs a vLLM function
takes (a `FusedMoEConfig`, a stub layer, a stub `self`) and calls the function. The
only patches are platform probes (`current_platform.is_rocm`, a kernel class's
`_supports_current_device`, the zentorch op probe) so that a GPU or another ISA's
gate can be asked on this CPU machine; each patch is named where it is applied.

It imports without vLLM (so that the lane is collected, then skipped or failed by the
conftest's `engine` fixture); every helper needs vLLM.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
from collections import Counter
from collections.abc import Callable
from typing import Any
from unittest import mock

import torch

from layoutc.tools.kit.drivers import vllm_common

try:
    from vllm.model_executor.layers.fused_moe import config as moe_config_module
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
    )
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
except Exception:  # a --no-deps vllm fails deep inside; conftest's `engine` fixture skips or fails
    pass

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _flattened(tps: tuple[int, ...], dps: tuple[int, ...], pcps: tuple[int, ...]) -> tuple[int, ...]:
    sizes = set()
    with mock.patch.object(moe_config_module, "get_tensor_model_parallel_rank", return_value=0):
        for tp in tps:
            for dp in dps:
                for pcp in pcps:
                    size, _ = FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp(tp, dp, 0, pcp, 0)
                    sizes.add(size)
    return tuple(sorted(sizes))


def effective_tp_degrees() -> tuple[int, ...]:
    """Every MoE TP degree vLLM forms for tp in {1, 2, 4, 8}, dp in 1..8, pcp in {1, 2}:
    `FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp(tp, dp, 0, pcp, 0)` (rank probe
    patched to 0). Every contract's tp_size domain holds exactly these 24, and the sweeps use them."""
    return _flattened((1, 2, 4, 8), tuple(range(1, 9)), (1, 2))


def activation(name: str) -> MoEActivation:
    return MoEActivation(name)


def moe_config(*, num_experts: int = 8, hidden_size: int, intermediate_size: int, tp_size: int,
               activation_name: str = "silu", dtype: torch.dtype = torch.bfloat16, **extra: Any) -> FusedMoEConfig:
    """vLLM's own FusedMoEConfig for one layer (pure TP, no EP/DP split of experts), two experts per
    token: the kits' `vllm_moe_config` (layoutc/tools/kit/drivers/vllm_common.py), one copy of the call.

    Raises whatever vLLM raises for an ill-formed layer (AssertionError when
    intermediate_size % tp_size != 0, NotImplementedError for a non-gated activation
    on CPU).
    """
    return vllm_common.vllm_moe_config(num_experts=num_experts, hidden_size=hidden_size,
                                       intermediate_size=intermediate_size, tp_size=tp_size,
                                       activation=activation_name, dtype=dtype, experts_per_token=2, **extra)


def rocm_platform(cdna_version: int = 4) -> contextlib.AbstractContextManager[None]:
    """Make vLLM's ROCm branches reachable on this CPU host: `current_platform.is_rocm()`
    returns True and `vllm.platforms.rocm` is a stub (the real module loads ROCm libraries
    and dies with SIGILL here) for a gfx950 (MI355X, CDNA4) device: `get_cdna_version`,
    `on_gfx950` True, `on_gfx1250` False (the kits' `vllm_rocm_platform`, one copy)."""
    return vllm_common.vllm_rocm_platform(cdna_version)


def _loader_self(config: FusedMoEConfig) -> Any:
    """The attributes RoutedExperts._load_w13/_load_w2 read from `self` (the kits' helper)."""
    return vllm_common._loader_self(config)


def load_w13(config: FusedMoEConfig, param: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, rank: int) -> torch.Tensor:
    """vLLM's loader: load checkpoint w1 [E, I, H] and w3 [E, I, H] into `param`
    ([E, 2 * I_param, H], modified in place) for TP rank `rank`, one expert at a time,
    with RoutedExperts._load_w13 (the kits' `vllm_load_w13`)."""
    return vllm_common.vllm_load_w13(config, param, w1, w3, rank)


def load_w2_grouped(config: FusedMoEConfig, expert_param: torch.Tensor, w2: torch.Tensor, rank: int,
                    is_scale: bool = False) -> torch.Tensor:
    """vLLM's grouped loader RoutedExperts._load_model_weight_or_group_weight_scale for one
    expert's w2 ([H, I_param], shard_dim 1): the path that honours
    `moe_config.tp_shard_with_padding` (block-FP8 TP-shard padding)."""
    fake = _loader_self(config)
    fake._load_w2 = lambda **kw: RoutedExperts._load_w2(fake, **kw)
    fake._load_w13 = lambda **kw: RoutedExperts._load_w13(fake, **kw)
    RoutedExperts._load_model_weight_or_group_weight_scale(fake, shard_dim=1, expert_data=expert_param, shard_id="w2",
                                                           loaded_weight=w2, tp_rank=rank, is_scale=is_scale)
    return expert_param


def load_w13_grouped(config: FusedMoEConfig, expert_param: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor,
                     rank: int, is_scale: bool = False) -> torch.Tensor:
    """vLLM's grouped loader RoutedExperts._load_model_weight_or_group_weight_scale for one
    expert's w13 ([2 * I_param, ...], shard_dim 0): the gate (shard_id "w1") then the up
    projection ("w3"), each into its half; honours `moe_config.tp_shard_with_padding`."""
    fake = _loader_self(config)
    fake._load_w2 = lambda **kw: RoutedExperts._load_w2(fake, **kw)
    fake._load_w13 = lambda **kw: RoutedExperts._load_w13(fake, **kw)
    for shard_id, w in (("w1", w1), ("w3", w3)):
        RoutedExperts._load_model_weight_or_group_weight_scale(fake, shard_dim=0, expert_data=expert_param,
                                                               shard_id=shard_id, loaded_weight=w, tp_rank=rank,
                                                               is_scale=is_scale)
    return expert_param


def load_w2(config: FusedMoEConfig, param: torch.Tensor, w2: torch.Tensor, rank: int) -> torch.Tensor:
    """vLLM's loader: checkpoint w2 [E, H, I] into `param` [E, H, I_param] for `rank` with
    RoutedExperts._load_w2 (the kits' `vllm_load_w2`)."""
    return vllm_common.vllm_load_w2(config, param, w2, rank)


def gpt_oss_mxfp4_rank_rows(intermediate_size: int, tp_size: int, rank: int, hidden_size: int = 8,
                            num_experts: int = 1) -> dict[str, Any]:
    """What vLLM's gpt-oss MXFP4 loader hands rank `rank`: runs
    `GptOssModel._load_weights_mxfp4` on a stub `self` (its parameters record what their
    weight_loader receives) with the distributed probes patched to a pure-TP world of
    `tp_size` ranks. Returns the checkpoint w13 rows (interleaved gate/up), the w2 columns
    (unpacked values) and whether the w2 bias survived, as lists of checkpoint indices."""
    from vllm.model_executor.models import gpt_oss

    I, E, H = intermediate_size, num_experts, hidden_size  # noqa: E741  (the field's names)
    got: dict[str, Any] = {}

    def param(name: str) -> torch.nn.Parameter:
        p = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        p.weight_loader = lambda _p, w, **_k: got.__setitem__(name, w.clone())  # type: ignore[attr-defined]
        return p

    prefix = "layers.0.mlp.experts."
    params = {prefix + n: param(n) for n in ("w13_weight", "w2_weight", "w2_bias")}
    fake = types.SimpleNamespace(
        named_parameters=lambda: list(params.items()),
        parallel_config=types.SimpleNamespace(enable_expert_parallel=False),
        config=types.SimpleNamespace(num_local_experts=E, intermediate_size=I),
        _try_load_streamed_expert=lambda *a, **k: False)
    # checkpoint tensors whose values are their own index along the sharded dim
    w13 = torch.arange(2 * I, dtype=torch.float32).view(1, 2 * I, 1).expand(E, 2 * I, 1).contiguous()
    w2 = torch.arange(I // 2, dtype=torch.float32).view(1, 1, I // 2).expand(E, H, I // 2).contiguous()
    weights = [(prefix + "w13_weight", w13), (prefix + "w2_weight", w2), (prefix + "w2_bias", torch.ones(E, H))]
    world = types.SimpleNamespace(world_size=1, rank_in_group=0)
    with mock.patch.object(gpt_oss, "get_tensor_model_parallel_world_size", return_value=tp_size), \
            mock.patch.object(gpt_oss, "get_dp_group", return_value=world), \
            mock.patch.object(gpt_oss, "get_pcp_group", return_value=world), \
            mock.patch.object(gpt_oss, "is_pp_missing_parameter", return_value=False), \
            mock.patch.object(moe_config_module, "get_tensor_model_parallel_rank", return_value=rank):
        gpt_oss.GptOssModel._load_weights_mxfp4(fake, 0, 0, 0, 0, weights, [])
    packed = got["w2_weight"][0, 0].long().tolist()  # packed byte columns: values 2c, 2c + 1
    return {"w13_rows": got["w13_weight"][0, :, 0].long().tolist(),
            "w2_values": [v for c in packed for v in (2 * c, 2 * c + 1)],
            "w2_bias_kept": bool(got["w2_bias"].abs().sum() > 0)}


def plan_or_none(module: Any, **params: Any) -> Any:
    """layoutc's verdict: the Plan, or None when plan() refuses (LayoutContractError)."""
    try:
        return module.plan(**params)
    except module.LayoutContractError:
        return None


def call_or_reject(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """(True, result) or (False, the exception) for a vLLM call that may refuse the layer."""
    try:
        return True, fn(*args, **kwargs)
    except (AssertionError, ValueError, NotImplementedError) as exc:
        return False, exc


@dataclasses.dataclass
class Tally:
    """Decisions compared and disagreements found, by the known-list key that explains each."""

    decisions: int = 0
    sizes: int = 0
    tensors: int = 0
    disagreements: Counter[str] = dataclasses.field(default_factory=Counter)
    examples: dict[str, str] = dataclasses.field(default_factory=dict)

    def record(self, key: str, example: str) -> None:
        from tests.support.conformance.known import KNOWN

        assert key == "unexplained" or key in KNOWN, f"{key!r} is not in tests/support/conformance/known.py"
        self.disagreements[key] += 1
        self.examples.setdefault(key, example)

    def summary(self) -> str:
        parts = [f"{self.decisions} admission decisions, {self.sizes} padded sizes/arguments, {self.tensors} tensors"]
        for key, count in sorted(self.disagreements.items()):
            parts.append(f"{key}: {count} (e.g. {self.examples[key]})")
        return "; ".join(parts)


def lcm(a: int, b: int) -> int:
    return math.lcm(a, b)


def mxfp4_admission_key(vllm_admits: bool, activation: str, intermediate_size: int, tp_size: int,
                        hidden_size: int | None = None) -> str:
    """The known-list key of an MXFP4 admission disagreement (vLLM admits, layoutc refuses):
    a hidden size that is not whole 32-value blocks is one no MXFP4 checkpoint has (w13's
    scales cover K = hidden_size in blocks of 32: `mxfp4_hidden_not_32`); swigluoai is gpt-oss, whose loader shards in whole 32-value blocks (as the contracts do)
    but drops the rows past I's last whole block (`gpt_oss_mxfp4_i_not_32`); silu is
    Mxfp4MoEMethod, whose generic loader mis-cuts w2's scales when I / tp is not whole
    blocks (`mxfp4_ipp_not_32`). Anything else is "unexplained"."""
    if vllm_admits and hidden_size is not None and hidden_size % 32:
        return "mxfp4_hidden_not_32"
    if vllm_admits and activation == "swigluoai" and intermediate_size % 32:
        return "gpt_oss_mxfp4_i_not_32"
    if vllm_admits and activation != "swigluoai" and (intermediate_size // tp_size) % 32:
        return "mxfp4_ipp_not_32"
    return "unexplained"


def compare_mxfp4_plan(tally: Tally, where: str, vllm_admits: bool, plan: Any, activation_name: str,
                       hidden_size: int, intermediate_size: int, tp_size: int,
                       round_up: Callable[..., tuple[int, int]], backend: Any) -> None:
    """Tally one MXFP4 configuration: vLLM's admission against layoutc's `plan` (None: refused;
    a disagreement keyed by `mxfp4_admission_key`), then, where both admit, vLLM's
    `round_up(backend, H, I // tp, activation)` (its mxfp4_round_up_hidden_size_and_intermediate_size)
    against the plan's (hidden_size_padded, intermediate_size_per_partition_padded)."""
    if vllm_admits != (plan is not None):
        key = mxfp4_admission_key(vllm_admits, activation_name, intermediate_size, tp_size, hidden_size)
        tally.record(key, f"{where}: vllm={vllm_admits} layoutc={plan is not None}")
        return
    if vllm_admits:
        tally.sizes += 1
        want = round_up(backend, hidden_size, intermediate_size // tp_size, activation(activation_name))
        got = (plan.hidden_size_padded, plan.intermediate_size_per_partition_padded)
        if want != got:
            tally.record("unexplained", f"{where}: vllm {want} layoutc {got}")


# ---- quantized loading: vLLM's own weight_loader and process_weights_after_loading ----------

#: RoutedExperts' loading methods, copied (as descriptors) onto a bare module: the real code of
#: `RoutedExperts.weight_loader` and everything it calls, without RoutedExperts.__init__ (which
#: needs a vLLM engine config and a device).
_LOADER_METHODS = ("weight_loader", "_load_w13", "_load_w2", "_load_model_weight_or_group_weight_scale",
                   "_load_per_channel_weight_scale", "_load_per_tensor_weight_scale", "_load_combined_w13_weight_scale",
                   "_load_single_value", "_get_hidden_dim", "_narrow_expert_data_for_padding", "_to_scalar",
                   "_orient_fused_weight")


def routed_experts_stub(config: FusedMoEConfig, quant_config: Any, quant_method: Any) -> torch.nn.Module:
    """A torch module carrying vLLM's own RoutedExperts loading methods and the attributes they
    read: `moe_config` (its tp_rank and tp_size are the rank's), `quant_config` (its get_name()),
    `quant_method` (its class name picks the loader branch), no fused shared experts, and an
    identity expert map (pure TP: every expert is local, as ExpertMapManager maps it without EP).
    `quant_method.create_weights(stub, ...)` registers the method's parameters on it."""
    cls = type("RoutedExpertsLoader", (torch.nn.Module,), {n: RoutedExperts.__dict__[n] for n in _LOADER_METHODS})
    layer = cls()
    layer.moe_config = config
    layer.quant_config = quant_config
    layer.quant_method = quant_method
    layer._fused_shared_expert_quantizer = None
    layer._loaded_expert_biases = set()
    layer._map_global_expert_id_to_local_expert_id = lambda expert_id: expert_id
    layer.intermediate_size_per_partition = config.intermediate_size_per_partition
    layer.hidden_size = config.hidden_dim
    return layer


def rank_config(config: FusedMoEConfig, rank: int) -> FusedMoEConfig:
    """`config` as TP rank `rank` of its tp_size sees it (FusedMoEParallelConfig.tp_rank). A
    shallow copy, so that what vLLM set on `config` after __post_init__ (the block-FP8 TP-shard
    padding: tp_shard_with_padding, the rounded intermediate_size_per_partition) is kept."""
    import copy

    ranked = copy.copy(config)
    ranked.moe_parallel_config = dataclasses.replace(config.moe_parallel_config, tp_rank=rank)
    return ranked


def load_experts(layer: torch.nn.Module, checkpoint: dict[str, dict[str, list[torch.Tensor]]]) -> int:
    """Feed a checkpoint through vLLM's `layer.weight_loader`, as a model's load_weights does
    after make_expert_params_mapping renamed `experts.{e}.{gate,up,down}_proj.{suffix}` to the
    parameter `w13_{suffix}` / `w2_{suffix}`: `checkpoint[param_name][shard_id][e]` is expert e's
    tensor for shard_id "w1" (gate), "w3" (up) or "w2" (down). Returns the calls made."""
    calls = 0
    for param_name, shards in checkpoint.items():
        param = getattr(layer, param_name)
        for shard_id, per_expert in shards.items():
            for e, tensor in enumerate(per_expert):
                layer.weight_loader(param, tensor, f"model.layers.0.mlp.experts.{param_name}", shard_id, e)
                calls += 1
    return calls


class StoppedAtGpuOp(Exception):
    """Raised in place of the first GPU-only op: `op` is its name, `args`/`kwargs` what it was
    called with, `caller` the calling frame's locals at that moment and `outer` the locals of
    the frames around it (the caller's caller first)."""

    def __init__(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], frames: list[dict[str, Any]]) -> None:
        super().__init__(op)
        self.op, self.args, self.kwargs = op, args, kwargs
        self.caller, self.outer = frames[0], frames[1:]


def run_until_gpu_op(fn: Callable[[], Any], owner: Any, op: str) -> StoppedAtGpuOp:
    """Run `fn` (a vLLM process_weights_after_loading) on CPU until it calls `owner.op`, the first
    op that needs a GPU (a CUDA kernel): that op is replaced by one that records its arguments
    and the caller's locals and stops the run. Everything before it is vLLM's own code, run
    as is. AssertionError if `fn` returns without reaching the op."""
    import inspect

    def stop(*args: Any, **kwargs: Any) -> None:
        frames, frame = [], inspect.currentframe()
        while frame is not None and frame.f_back is not None and len(frames) < 4:
            frame = frame.f_back
            frames.append(dict(frame.f_locals))
        raise StoppedAtGpuOp(op, args, kwargs, frames)

    with mock.patch.object(owner, op, stop, create=True):
        try:
            fn()
        except StoppedAtGpuOp as stopped:
            return stopped
    raise AssertionError(f"{fn} returned without calling {op}")


def gpt_oss_load_mxfp4(layer: torch.nn.Module, weights: dict[str, torch.Tensor], intermediate_size: int,
                       tp_size: int, rank: int) -> None:
    """vLLM's gpt-oss MXFP4 loader, `GptOssModel._load_weights_mxfp4`, run on a stub model whose
    only parameters are `layer`'s (created by the quant method's create_weights, so each
    carries its real `weight_loader`), for TP rank `rank` of a pure-TP world of `tp_size`
    ranks (the distributed probes patched, as in gpt_oss_mxfp4_rank_rows). `weights` maps
    `w13_weight`, `w13_weight_scale`, `w13_bias`, `w2_*` to the checkpoint's tensors as the
    model's name mapping hands them over; each is cloned (the loader zeroes a w2 bias in place
    on ranks > 0)."""
    from vllm.model_executor.models import gpt_oss

    prefix = "layers.0.mlp.experts."
    num_experts = next(iter(weights.values())).shape[0]
    fake = types.SimpleNamespace(
        named_parameters=lambda: [(prefix + n, p) for n, p in layer.named_parameters()],
        parallel_config=types.SimpleNamespace(enable_expert_parallel=False),
        config=types.SimpleNamespace(num_local_experts=num_experts, intermediate_size=intermediate_size),
        _try_load_streamed_expert=lambda *a, **k: False)
    world = types.SimpleNamespace(world_size=1, rank_in_group=0)
    with mock.patch.object(gpt_oss, "get_tensor_model_parallel_world_size", return_value=tp_size), \
            mock.patch.object(gpt_oss, "get_dp_group", return_value=world), \
            mock.patch.object(gpt_oss, "get_pcp_group", return_value=world), \
            mock.patch.object(gpt_oss, "is_pp_missing_parameter", return_value=False), \
            mock.patch.object(moe_config_module, "get_tensor_model_parallel_rank", return_value=rank):
        gpt_oss.GptOssModel._load_weights_mxfp4(fake, 0, 0, 0, 0, [(prefix + n, w.clone()) for n, w in weights.items()],
                                                [])
