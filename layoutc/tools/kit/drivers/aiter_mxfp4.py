"""vLLM's AITER MXFP4 (W4A16, `Mxfp4MoeBackend.AITER_MXFP4_BF16`) MoE path, its pure-torch parts: the
padded sizes `oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size(AITER_MXFP4_BF16, H,
I_pp, activation)` (the activation, or None where the caller passes none: `activation_passed`), the
pad counts `experts/rocm_aiter_moe.py::rocm_aiter_fused_experts` hands AITER (`hidden_pad`,
`intermediate_pad`, against the contract's `kernel_args`), and vLLM's generic loader
`RoutedExperts._load_w13/_load_w2` into the padded parameter, every rank, against `shard_w13` /
`shard_w2`. The checkpoint is stood in by bf16 values (the contract states the weights unpacked);
the parameter is `torch.zeros`, as `Mxfp4MoEMethod.create_weights` allocates it (so the poisoned
run holds the loader and the round-up only, not that allocation). vLLM's ROCm branch is reached
with `vllm_rocm_platform()` (is_rocm True, a stub `vllm.platforms.rocm` for CDNA4); AITER's kernel
launch `rocm_aiter_ops.fused_moe` is the device-only step, replaced by a recorder of its pad
arguments. Gate: `AiterExperts.is_supported_config` (kMxfp4Static weights; `_supports_current_device`
patched).
"""

# Names from the kit's other parts (base.py, vllm_common.py), defined above this text in a kit;
# E, H, I are the field's names.
# ruff: noqa: F821, E741

import enum
import sys
import types
from typing import Any
from unittest import mock

import torch

# The engine objects this driver drives: it drives the contracts whose `models` lines name every one
# (layoutc/tools/kit/write.py `drives`), read from the contracts, never named here.
MODELS = (
    "vllm.model_executor.layers.fused_moe.experts.rocm_aiter_moe:AiterExperts",
    "vllm.model_executor.layers.quantization.mxfp4:Mxfp4MoEMethod",
)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
SHARED = ("vllm_common",)
AITER = "vllm.model_executor.layers.fused_moe.experts.rocm_aiter_moe"
MXFP4 = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
TARGETS = {
    f"{MXFP4}:mxfp4_round_up_hidden_size_and_intermediate_size":
        ("backend", "hidden_size", "intermediate_size", "activation"),
    f"{AITER}:rocm_aiter_fused_experts": None,
    f"{AITER}:AiterExperts.is_supported_config":
        ("cls", "moe_config", "weight_key", "activation_key", "activation_format"),
    "vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts._load_w13": None,
    "vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts._load_w2": None,
}
# swigluoai (gpt-oss) checkpoints load through GptOssModel._load_weights_mxfp4 (blocks of 32 per
# rank, a shorter last rank), not the generic loader this driver runs: it is left to that loader's kit.
SCOPE = {"activation": ("silu", "gelu")}


class _GateMode(enum.Enum):  # the members aiter.ops.flydsl.moe_common.GateMode offers the function
    INTERLEAVE = enum.auto()
    SEPARATED = enum.auto()


def known(params: dict[str, Any]) -> str | None:
    """A documented disagreement (tests/support/conformance/known.py, oracle.mxfp4_admission_key): vLLM's AITER
    gate admits an MXFP4 shard whose w2 scales are not whole 32-value blocks, which its generic loader
    mis-cuts."""
    if params["activation"] != "swigluoai" and (params["intermediate_size"] // params["tp_size"]) % 32:
        return "mxfp4_ipp_not_32 (a vLLM bug: the generic loader mis-cuts w2's scales when I / tp is not whole blocks)"
    return None


def _activation(params: dict[str, Any]) -> Any:
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    return MoEActivation(params["activation"])


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    import importlib

    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.quantization.utils import quant_utils

    cls = importlib.import_module(AITER).AiterExperts
    try:
        config = vllm_moe_config(num_experts=params["num_experts"], hidden_size=params["hidden_size"],
                                 intermediate_size=params["intermediate_size"], tp_size=params["tp_size"],
                                 activation=params["activation"])
    except (AssertionError, ValueError, NotImplementedError):
        return False
    with vllm_rocm_platform(), mock.patch.object(cls, "_supports_current_device", staticmethod(lambda: True)):
        ok, _ = cls.is_supported_config(cls, config, quant_utils.kMxfp4Static, None,
                                        mk.FusedMoEActivationFormat.Standard)
    return bool(ok)


def _aiter_pads(aiter: Any, config: Any, hidden: int, activation: Any) -> dict[str, int]:
    stub = types.ModuleType("aiter.ops.flydsl.moe_common")
    stub.GateMode = _GateMode
    seen: dict[str, int] = {}

    def record(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.update(hidden_pad=kwargs["hidden_pad"], intermediate_pad=kwargs["intermediate_pad"])
        return torch.zeros(1)

    ops = aiter.rocm_aiter_ops
    with mock.patch.dict(sys.modules, {"aiter": types.ModuleType("aiter"), "aiter.ops": types.ModuleType("aiter.ops"),
                                       "aiter.ops.flydsl": types.ModuleType("aiter.ops.flydsl"),
                                       "aiter.ops.flydsl.moe_common": stub}), \
            mock.patch.object(ops, "fused_moe", record), \
            mock.patch.object(ops, "get_aiter_activation_type", lambda name: 7, create=True):
        aiter.rocm_aiter_fused_experts(torch.zeros(1, hidden), None, None, torch.ones(1, 1),
                                       torch.zeros(1, 1, dtype=torch.int32), config, activation=activation)
    return seen


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine value, the contract value's thunk): padded sizes, pad counts, every rank's tensors."""
    import importlib

    aiter, mxfp4 = importlib.import_module(AITER), importlib.import_module(MXFP4)
    E, H, I, tp = params["num_experts"], params["hidden_size"], params["intermediate_size"], params["tp_size"]
    passed = _activation(params) if params.get("activation_passed", 1) else None
    with vllm_rocm_platform():
        Hp, P = mxfp4.mxfp4_round_up_hidden_size_and_intermediate_size(mxfp4.Mxfp4MoeBackend.AITER_MXFP4_BF16, H,
                                                                       I // tp, passed)
    yield "padded hidden", torch.tensor([Hp]), lambda: torch.tensor([plan.hidden_size_padded])
    yield "padded intermediate", torch.tensor([P]), lambda: torch.tensor([plan.intermediate_size_per_partition_padded])
    config = vllm_moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                             activation=params["activation"])
    config.hidden_dim, config.intermediate_size_per_partition = Hp, P  # what RoutedExperts.__init__ does
    pads = _aiter_pads(aiter, config, Hp, _activation(params))
    want = gen.kernel_args(plan)
    yield "kernel hidden_pad", torch.tensor([pads["hidden_pad"]]), lambda: torch.tensor([want["hidden_pad"]])
    yield "kernel intermediate_pad", torch.tensor([pads["intermediate_pad"]]), \
        lambda: torch.tensor([want["intermediate_pad"]])
    g = torch.Generator().manual_seed(0)
    td = torch.bfloat16
    w1, w3 = torch.randn(E, I, H, generator=g).to(td), torch.randn(E, I, H, generator=g).to(td)
    w2 = torch.randn(E, H, I, generator=g).to(td)
    for rank in range(tp):
        w13_p = vllm_load_w13(config, torch.zeros(E, 2 * P, Hp, dtype=td), w1, w3, rank)
        w2_p = vllm_load_w2(config, torch.zeros(E, Hp, P, dtype=td), w2, rank)
        yield f"w13 rank {rank}", w13_p, lambda r=rank: gen.shard_w13(torch.cat([w1, w3], 1), r, plan)
        yield f"w2 rank {rank}", w2_p, lambda r=rank: gen.shard_w2(w2, r, plan)
