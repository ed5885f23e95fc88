"""vLLM's gpt-oss MXFP4 MoE under --moe-backend flashinfer_trtllm, every TP rank: `GptOssMxfp4MoEMethod`
(must pick FLASHINFER_TRTLLM_MXFP4_BF16), its `maybe_roundup_sizes` (I_pp to 128, H to 256) and
`create_weights` (`torch.zeros`), gpt-oss's own loader `GptOssModel._load_weights_mxfp4` through
`RoutedExperts.weight_loader` (rank r's rows cdiv(I / 32, tp) * 32 a rank, the last shorter; the w2
bias on rank 0 only), then `process_weights_after_loading` up to its first device-only operation,
FlashInfer's `get_w2_permute_indices_with_cache` (the TRT-LLM tile shuffle) in
`convert_gpt_oss_weight_to_mxfp4_moe_kernel_format`, where the path stops (a recording stop, never run):
the weights, E8M0 scales and float32 biases that function holds there (after its
`swap_every_two_rows`, (gate, up) -> (up, gate)) are compared with the contract's `shard_*`, each named
`... (at get_w2_permute_indices_with_cache)`.

Stubbed, and nothing else: the device probes `TrtLlmMxfp4ExpertsMonolithic._supports_current_device`
(Blackwell) and `CPUExpertsMxfp4._supports_current_device`, the engine config select_mxfp4_moe_backend
reads for a user activation override (none), `flashinfer` (a CUDA library: stub modules whose functions
are never run), gpt-oss's distributed probes (a pure-TP world of tp_size, this rank). The layer is
RoutedExperts' loading methods on a bare module (`vllm_loader_common.py`). `activation` is scoped to
swigluoai (gpt-oss; silu layers load through the generic loader). No gate (`engine_admits` is None).
"""

# Names from the kit's other parts (base.py, vllm_common.py, vllm_loader_common.py), defined above
# this text in a kit; E, H, I are the field's names.
# ruff: noqa: F821, E741

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = (
    "vllm.model_executor.layers.fused_moe.experts.trtllm_mxfp4_moe:TrtLlmMxfp4ExpertsMonolithic",
    "vllm.model_executor.layers.quantization.mxfp4:GptOssMxfp4MoEMethod",
)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
SHARED = ("vllm_common", "vllm_loader_common")
MXFP4_METHOD = "vllm.model_executor.layers.quantization.mxfp4"
MXFP4_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
TARGETS = {
    f"{MXFP4_METHOD}:GptOssMxfp4MoEMethod.create_weights": None,
    f"{MXFP4_METHOD}:GptOssMxfp4MoEMethod.process_weights_after_loading": ("self", "layer"),
    f"{MXFP4_ORACLE}:convert_gpt_oss_weight_to_mxfp4_moe_kernel_format": None,
    # 0.33 re-signed it (5 positional arguments): a named signature failure, not a TypeError mid-path
    "vllm.model_executor.models.gpt_oss:GptOssModel._load_weights_mxfp4":
        ("self", "ep_rank_end", "ep_rank_start", "heads_per_rank", "head_start", "weights", "stacked_params_mapping"),
}
SCOPE = {"activation": ("swigluoai",)}
#: the first device-only operation of the path (a FlashInfer function): where it stops
STOP = "get_w2_permute_indices_with_cache"
NAMES = ("w13_weight", "w13_weight_scale", "w13_bias", "w2_weight", "w2_weight_scale", "w2_bias")


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    return None


@contextlib.contextmanager
def _trtllm_device() -> Iterator[Any]:
    """The device probes answer True, no activation override, and `flashinfer` is a stub package whose
    functions are never run (the first one called is the stop). Yields `flashinfer.fused_moe.core`."""
    import importlib

    from vllm.model_executor.layers.fused_moe.experts import cpu_moe, trtllm_mxfp4_moe

    oracle = importlib.import_module(MXFP4_ORACLE)

    def unused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a flashinfer stub function ran")

    stubs = {name: types.ModuleType(name) for name in
             ("flashinfer", "flashinfer.fp4_quantization", "flashinfer.fused_moe", "flashinfer.fused_moe.core")}
    stubs["flashinfer.fp4_quantization"].nvfp4_block_scale_interleave = unused
    stubs["flashinfer.fused_moe.core"].get_w2_permute_indices_with_cache = unused
    engine = types.SimpleNamespace(model_config=types.SimpleNamespace(quantization_config=None))
    with mock.patch.object(trtllm_mxfp4_moe.TrtLlmMxfp4ExpertsMonolithic, "_supports_current_device",
                           staticmethod(lambda: True)), \
            mock.patch.object(cpu_moe.CPUExpertsMxfp4, "_supports_current_device", staticmethod(lambda: True)), \
            mock.patch.object(oracle, "get_current_vllm_config", return_value=engine), \
            mock.patch.dict(sys.modules, stubs):
        yield stubs["flashinfer.fused_moe.core"]


def _load(layer: torch.nn.Module, weights: dict[str, torch.Tensor], I: int, tp: int, rank: int) -> None:
    """gpt-oss's `GptOssModel._load_weights_mxfp4` on a stub model whose only parameters are `layer`'s,
    for TP rank `rank` of a pure-TP world of `tp` ranks; each tensor is cloned (the loader zeroes a w2
    bias in place on ranks > 0)."""
    from vllm.model_executor.layers.fused_moe import config as moe_config_module
    from vllm.model_executor.models import gpt_oss

    prefix = "layers.0.mlp.experts."
    E = next(iter(weights.values())).shape[0]
    fake = types.SimpleNamespace(
        named_parameters=lambda: [(prefix + n, p) for n, p in layer.named_parameters()],
        parallel_config=types.SimpleNamespace(enable_expert_parallel=False),
        config=types.SimpleNamespace(num_local_experts=E, intermediate_size=I),
        _try_load_streamed_expert=lambda *a, **k: False)
    world = types.SimpleNamespace(world_size=1, rank_in_group=0)
    with mock.patch.object(gpt_oss, "get_tensor_model_parallel_world_size", return_value=tp), \
            mock.patch.object(gpt_oss, "get_dp_group", return_value=world), \
            mock.patch.object(gpt_oss, "get_pcp_group", return_value=world), \
            mock.patch.object(gpt_oss, "is_pp_missing_parameter", return_value=False), \
            mock.patch.object(moe_config_module, "get_tensor_model_parallel_rank", return_value=rank):
        gpt_oss.GptOssModel._load_weights_mxfp4(fake, 0, 0, 0, 0, [(prefix + n, w.clone()) for n, w in weights.items()],
                                                [])


def _checkpoint(E: int, H: int, I: int) -> dict[str, torch.Tensor]:
    """gpt-oss's expert tensors as its name mapping hands them over: w13 [E, 2I, H / 32, 16] e2m1 bytes
    (rows interleaved gate, up), its E8M0 scales [E, 2I, H / 32] (no 255: NaN), w13 bias [E, 2I] bf16,
    w2 [E, H, I / 32, 16], w2 scales [E, H, I / 32], w2 bias [E, H]; never 0 (a pad is never data)."""
    g = torch.Generator().manual_seed(7)

    def u8(*shape: int, high: int = 256) -> torch.Tensor:
        return torch.randint(1, high, shape, dtype=torch.uint8, generator=g)

    def bias(*shape: int) -> torch.Tensor:
        return (torch.rand(shape, generator=g) + 2).to(torch.bfloat16)

    return {"w13_weight": u8(E, 2 * I, H // 32, 16), "w13_weight_scale": u8(E, 2 * I, H // 32, high=255),
            "w13_bias": bias(E, 2 * I), "w2_weight": u8(E, H, I // 32, 16), "w2_weight_scale": u8(E, H, I // 32, high=255),
            "w2_bias": bias(E, H)}


def _full(checkpoint: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """The full tensor the contract shards: blocks flattened to [E, N, K / 2], biases float32, w13's
    (gate, up) row pairs as the contract's (up, gate)."""
    t = checkpoint[name]
    t = (t.flatten(2) if t.ndim == 4 else t).contiguous()
    t = t.to(torch.float32) if "bias" in name else t
    if name.startswith("w13"):
        gate, up = t[:, 0::2], t[:, 1::2]
        t = torch.stack([up, gate], 2).flatten(1, 2)
    return t.contiguous()


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine tensor, the contract tensor's thunk): every rank's six tensors where the path stops."""
    import importlib

    method_mod = importlib.import_module(MXFP4_METHOD)
    oracle = importlib.import_module(MXFP4_ORACLE)
    E, H, I, tp = (params[k] for k in ("num_experts", "hidden_size", "intermediate_size", "tp_size"))
    checkpoint = _checkpoint(E, H, I)
    full = {n: _full(checkpoint, n) for n in NAMES}
    base = vllm_moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                           activation=params["activation"], has_bias=True, moe_backend="flashinfer_trtllm")
    for rank in range(tp):
        config = rank_config(base, rank)
        with _trtllm_device() as fi:
            method = method_mod.GptOssMxfp4MoEMethod(config)
            assert method.mxfp4_backend == oracle.Mxfp4MoeBackend.FLASHINFER_TRTLLM_MXFP4_BF16, method.mxfp4_backend
            hidden, i_pp = method.maybe_roundup_sizes(H, config.intermediate_size_per_partition, torch.bfloat16,
                                                      config.moe_parallel_config)
            layer = routed_experts_stub(config, method_mod.GptOssMxfp4Config(), method)
            method.create_weights(layer, E, hidden, i_pp, torch.bfloat16, weight_loader=layer.weight_loader)
            _load(layer, checkpoint, I, tp, rank)
            held = run_until(lambda m=method, lay=layer: m.process_weights_after_loading(lay), fi, STOP).frames[0]
        for name in NAMES:
            yield f"{name} rank {rank} (at {STOP})", held[name], \
                lambda n=name, r=rank: getattr(gen, f"shard_{n}")(full[n], r, plan)
