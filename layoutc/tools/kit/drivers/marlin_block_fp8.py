"""vLLM's block-FP8 [128, 128] MoE under --moe-backend marlin, the whole CPU-side path of
`quantization/fp8.py::Fp8MoEMethod`, every TP rank:

1. `Fp8MoEMethod.__init__` on the layer's own `FusedMoEConfig`: `resolve_fp8_moe_weight_block_shape`
   (`refine_fp8_moe_block_shape`; where Marlin cannot take the refined block,
   `pad_tp_shard_to_weight_blocks` rounds the TP shard up to whole 128-blocks and sets
   `tp_shard_with_padding`) and `select_fp8_moe_backend` (must pick MARLIN). The pad count compared:
   its `intermediate_size_per_partition` against the contract's.
2. `create_weights` (float8_e4m3fn weights, float32 `*_weight_scale_inv` block scales, allocated
   with `torch.empty`: poisoned in the poison test), then the checkpoint (gate / up [I, H], down
   [H, I] and their [cdiv(N, 128), cdiv(K, 128)] scales, every expert) through
   `RoutedExperts.weight_loader` (`_load_model_weight_or_group_weight_scale`: rank r's rows
   [min(r * I_pp, I), min((r + 1) * I_pp, I)), the rest zero for weights and one for scales).
3. `process_weights_after_loading` up to its first device-only operation, where the path stops:
   `ops.gptq_marlin_repack` in `marlin_utils_fp8.prepare_fp8_moe_layer_for_marlin` (a CUDA op),
   after the Marlin tile pads (`marlin_moe_padded_intermediate`, `_moe_pad_shard_rows`,
   `_moe_pad_last`; none at whole 128-blocks). Compared there: the w13 / w2 weights that function
   holds when it calls the op, and the loaded block scales (converted to per-column scales only
   after the op). Each tensor's name says where it was taken.

Stubbed, and nothing else: the device probe `MarlinExperts._supports_current_device` (CUDA with
capability 7.5) answers True; the TP world size `Fp8MoEMethod` reads is tp_size (no process group);
the layer is RoutedExperts' own loading methods on a bare module (`vllm_loader_common.py`); where
the release allocates the Marlin workspace in prepare_fp8_moe_layer_for_marlin (vLLM <= 0.30:
`marlin_make_workspace_new`, sized by a device query of the SM count), an empty stand-in buffer.
Gate: `Fp8MoEMethod` plus `create_weights` (on meta tensors) accept the layer and pick MARLIN.
Known: `marlin_fp8_h_not_128` (vLLM admits a hidden size off the Marlin tile the contract refuses).
MXFP8 is the `marlin_mxfp8` driver: `scheme` is scoped to fp8_block128 here.
"""

# Names from the kit's other parts (base.py, vllm_common.py, vllm_loader_common.py), defined above
# this text in a kit; E, H, I are the field's names.
# ruff: noqa: F821, E741

import contextlib
from collections.abc import Iterator
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
SHARED = ("vllm_common", "vllm_loader_common")
FP8_METHOD = "vllm.model_executor.layers.quantization.fp8"
FP8_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.fp8"
MARLIN_FP8 = "vllm.model_executor.layers.quantization.utils.marlin_utils_fp8"
TARGETS = {
    f"{FP8_METHOD}:Fp8MoEMethod.__init__": ("self", "quant_config", "layer"),
    f"{FP8_METHOD}:Fp8MoEMethod.create_weights": None,
    f"{FP8_METHOD}:Fp8MoEMethod.process_weights_after_loading": ("self", "layer"),
    f"{FP8_ORACLE}:resolve_fp8_moe_weight_block_shape": None,
    f"{FP8_ORACLE}:pad_tp_shard_to_weight_blocks": ("config", "weight_block_size"),
    "vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts._load_model_weight_or_group_weight_scale":
        ("self", "shard_dim", "expert_data", "shard_id", "loaded_weight", "tp_rank", "is_scale"),
    f"{MARLIN_FP8}:prepare_fp8_moe_layer_for_marlin":
        ("layer", "w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale"),
    "vllm._custom_ops:gptq_marlin_repack": None,
}
# Block FP8 only: MXFP8 ([1, 32]) is prepare_mxfp8_moe_layer_for_marlin (the marlin_mxfp8 driver).
SCOPE = {"scheme": ("fp8_block128",), "scale_dtype": ("float32",)}
#: the first device-only operation of the path: where it stops
STOP = ("ops", "gptq_marlin_repack")


def known(params: dict[str, Any]) -> str | None:
    """A documented disagreement (docs/kernels.md; tests/support/conformance/known.py): vLLM admits block FP8
    on Marlin with a hidden size off the 128 tile, which the contract refuses."""
    if params["hidden_size"] % 128:
        return "marlin_fp8_h_not_128 (a vLLM bug: Marlin needs hidden_size % 128 == 0)"
    return None


@contextlib.contextmanager
def _marlin_world(tp: int) -> Iterator[None]:
    """The device probe (MarlinExperts._supports_current_device: True) and the TP world size
    Fp8MoEMethod / validate_fp8_block_shape_moe read (tp: there is no process group)."""
    import importlib

    import vllm.distributed as dist
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExperts

    method = importlib.import_module(FP8_METHOD)
    with mock.patch.object(MarlinExperts, "_supports_current_device", staticmethod(lambda: True)), \
            mock.patch.object(dist, "get_tensor_model_parallel_world_size", return_value=tp), \
            mock.patch.object(method, "get_tensor_model_parallel_world_size", return_value=tp, create=True):
        yield


@contextlib.contextmanager
def _no_workspace(marlin: Any) -> Iterator[None]:
    """vLLM <= 0.30's prepare_fp8_moe_layer_for_marlin allocates the Marlin kernel's scratch buffer
    (`marlin_make_workspace_new`, sized by the device's SM count, a device query) between the tile pad
    and the repack: a stand-in gives an empty int32 buffer (no layout). Later releases do not call it there."""
    if not hasattr(marlin, "marlin_make_workspace_new"):
        yield
        return
    with mock.patch.object(marlin, "marlin_make_workspace_new", lambda *a, **k: torch.zeros(0, dtype=torch.int32)):
        yield


def _quant() -> Any:
    import importlib

    return importlib.import_module(FP8_METHOD).Fp8Config(is_checkpoint_fp8_serialized=True,
                                                         activation_scheme="dynamic", weight_block_size=[128, 128])


def block_fp8_method(params: dict[str, Any]) -> tuple[Any, Any]:
    """(layer config, Fp8MoEMethod) as vLLM builds them for --moe-backend marlin; raises what vLLM
    raises for a layer it refuses. The config is the layer's own, after the method's __init__ (which
    may pad the TP shard)."""
    import importlib

    config = vllm_moe_config(num_experts=params["num_experts"], hidden_size=params["hidden_size"],
                             intermediate_size=params["intermediate_size"], tp_size=params["tp_size"],
                             activation=params["activation"], moe_backend="marlin")
    shell = torch.nn.Module()
    shell.moe_config = config
    method = importlib.import_module(FP8_METHOD).Fp8MoEMethod(_quant(), shell)
    return shell.moe_config, method


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    """vLLM's own gate: the method's __init__ (block-shape resolution, backend selection) and
    create_weights (validate_fp8_block_shape_moe) accept the layer, on meta tensors, and pick Marlin."""
    import importlib

    oracle = importlib.import_module(FP8_ORACLE)
    try:
        with _marlin_world(params["tp_size"]), torch.device("meta"):
            config, method = block_fp8_method(params)
            layer = torch.nn.Module()
            layer.moe_config = config
            method.create_weights(layer, params["num_experts"], params["hidden_size"],
                                  config.intermediate_size_per_partition, torch.bfloat16, weight_loader=None)
    except (AssertionError, ValueError, NotImplementedError):
        return False
    return method.fp8_backend == oracle.Fp8MoeBackend.MARLIN


def _checkpoint(E: int, H: int, I: int) -> dict[str, dict[str, list[torch.Tensor]]]:
    """Per expert: gate / up [I, H] and down [H, I] float8_e4m3fn (finite codes, never 0: a pad byte is
    never taken for data) and their weight_scale_inv [cdiv(N, 128), cdiv(K, 128)] float32 in [2, 3)
    (never 0 or 1: a unit-scale tail is never taken for data)."""
    g = torch.Generator().manual_seed(5)

    def fp8(n: int, k: int) -> torch.Tensor:
        b = torch.randint(1, 256, (n, k), dtype=torch.uint8, generator=g)
        b[(b & 0x7F) == 0x7F] = 0x3C
        b[b == 0x80] = 0x3C  # -0.0
        return b.view(torch.float8_e4m3fn)

    def proj(n: int, k: int) -> dict[str, torch.Tensor]:
        return {"weight": fp8(n, k), "weight_scale_inv": torch.rand(-(-n // 128), -(-k // 128), generator=g) + 2}

    experts = [{"w1": proj(I, H), "w3": proj(I, H), "w2": proj(H, I)} for _ in range(E)]
    return {f"{stem}_{suffix}": {sid: [experts[e][sid][suffix] for e in range(E)] for sid in sids}
            for stem, sids in (("w13", ("w1", "w3")), ("w2", ("w2",))) for suffix in ("weight", "weight_scale_inv")}


def _full(checkpoint: dict[str, dict[str, list[torch.Tensor]]], name: str) -> torch.Tensor:
    """The stacked full checkpoint tensor the contract shards: w13 [E, 2 I.., ..] as [gate | up]."""
    shards = checkpoint[name]
    if name.startswith("w13"):
        return torch.stack([torch.cat([a, b], 0) for a, b in zip(shards["w1"], shards["w3"], strict=True)])
    return torch.stack(shards["w2"])


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine value, the contract value's thunk): the padded per-rank size, then every
    rank's weights where the path stops (ops.gptq_marlin_repack) and its loaded block scales."""
    import importlib

    oracle = importlib.import_module(FP8_ORACLE)
    marlin = importlib.import_module(MARLIN_FP8)
    E, H, I, tp = (params[k] for k in ("num_experts", "hidden_size", "intermediate_size", "tp_size"))
    checkpoint = _checkpoint(E, H, I)
    full = {name: _full(checkpoint, name) for name in checkpoint}
    where = f"at {'.'.join(STOP)}"
    with _marlin_world(tp):
        config, method = block_fp8_method(params)
        yield "intermediate_size_per_partition (Fp8MoEMethod.__init__)", \
            torch.tensor([config.intermediate_size_per_partition]), \
            lambda: torch.tensor([plan.intermediate_size_per_partition])
        yield "backend is MARLIN", torch.tensor([method.fp8_backend == oracle.Fp8MoeBackend.MARLIN]), \
            lambda: torch.tensor([True])
        for rank in range(tp):
            ranked = rank_config(config, rank)
            layer = routed_experts_stub(ranked, _quant(), method)
            method.create_weights(layer, E, H, ranked.intermediate_size_per_partition, torch.bfloat16,
                                  weight_loader=layer.weight_loader)
            load_experts(layer, checkpoint)
            w13_s, w2_s = layer.w13_weight_scale_inv.data.clone(), layer.w2_weight_scale_inv.data.clone()
            with _no_workspace(marlin):
                stop = run_until(lambda lay=layer: method.process_weights_after_loading(lay), getattr(marlin, STOP[0]),
                                 STOP[1])
            held = next((f for f in stop.frames if "w2_weight" in f and "w13_weight" in f), None)
            assert held is not None, f"{'.'.join(STOP)} was not called from prepare_fp8_moe_layer_for_marlin"
            for name, got in (("w13_weight", held["w13_weight"]), ("w2_weight", held["w2_weight"])):
                yield f"{name} rank {rank} ({where})", got.contiguous().view(torch.uint8), \
                    lambda n=name, r=rank: getattr(gen, f"shard_{n}")(full[n], r, plan).view(torch.uint8)
            for name, got in (("w13_weight_scale", w13_s), ("w2_weight_scale", w2_s)):
                yield f"{name} rank {rank} (loaded weight_scale_inv)", got, \
                    lambda n=name, r=rank: getattr(gen, f"shard_{n}")(full[f"{n}_inv"], r, plan)
