"""vLLM's AITER unquantized MoE path, its pure-torch parts: the padded size
(`oracle/unquantized.py::unquantized_round_up_hidden_size_and_intermediate_size(AITER, H, I_pp)`), the
pad counts `experts/rocm_aiter_moe.py::rocm_aiter_fused_experts` hands AITER (`hidden_pad`,
`intermediate_pad`, against the contract's `kernel_args`), and the tensors: vLLM's loader into a
NaN-filled padded parameter then `_zero_intermediate_padding`, against `shard_w13` / `shard_w2`, every
rank. The device-only step is AITER's own `rocm_aiter_ops.fused_moe` (the kernel launch): it is
replaced by a recorder of its pad arguments, and the `aiter` modules the function imports are stubs.
Gate: `AiterExperts.is_supported_config` (`_supports_current_device` patched).
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
    "vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method:UnquantizedFusedMoEMethod",
)
ENGINE = "vllm"
ENGINE_MODULE = "vllm"
# vLLM's pyproject registers both; skip_global_cleanup keeps its conftest from asking for an accelerator.
MARKS = ("skip_global_cleanup", "cpu_test")
SHARED = ("vllm_common",)
AITER = "vllm.model_executor.layers.fused_moe.experts.rocm_aiter_moe"
UNQ = "vllm.model_executor.layers.fused_moe.oracle.unquantized"
TARGETS = {
    f"{UNQ}:unquantized_round_up_hidden_size_and_intermediate_size": ("backend", "hidden_size", "intermediate_size"),
    f"{UNQ}:_zero_intermediate_padding": ("moe_config", "w13_weight", "w2_weight"),
    f"{AITER}:rocm_aiter_fused_experts": None,
    f"{AITER}:AiterExperts.is_supported_config":
        ("cls", "moe_config", "weight_key", "activation_key", "activation_format"),
}


class _GateMode(enum.Enum):  # the members aiter.ops.flydsl.moe_common.GateMode offers the function
    INTERLEAVE = enum.auto()
    SEPARATED = enum.auto()


def engine_admits(params: dict[str, Any], gen: Any) -> bool | None:
    import importlib

    from vllm.model_executor.layers.fused_moe import modular_kernel as mk

    cls = importlib.import_module(AITER).AiterExperts
    try:
        config = vllm_moe_config(num_experts=params["num_experts"], hidden_size=params["hidden_size"],
                                 intermediate_size=params["intermediate_size"], tp_size=params["tp_size"],
                                 activation=params["activation"], dtype=params["dtype"])
    except (AssertionError, ValueError, NotImplementedError):
        return False
    with mock.patch.object(cls, "_supports_current_device", staticmethod(lambda: True)):
        ok, _ = cls.is_supported_config(cls, config, None, None, mk.FusedMoEActivationFormat.Standard)
    return bool(ok)


def _aiter_pads(aiter: Any, config: Any, hidden: int, activation: str) -> dict[str, int]:
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

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
                                       torch.zeros(1, 1, dtype=torch.int32), config,
                                       activation=MoEActivation(activation))
    return seen


def engine_run(params: dict[str, Any], plan: Any, gen: Any, poison: bool) -> Any:
    """Yield (what, engine value, the contract value's thunk): pad counts, then every rank's tensors."""
    import importlib

    aiter, unq = importlib.import_module(AITER), importlib.import_module(UNQ)
    E, H, I, tp = params["num_experts"], params["hidden_size"], params["intermediate_size"], params["tp_size"]
    td = VLLM_DTYPES[params["dtype"]]
    _, P = unq.unquantized_round_up_hidden_size_and_intermediate_size(unq.UnquantizedMoeBackend.AITER, H, I // tp)
    config = vllm_moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                             activation=params["activation"], dtype=params["dtype"])
    config.intermediate_size_per_partition = P  # what RoutedExperts.__init__ does with the round-up's answer
    pads = _aiter_pads(aiter, config, H, params["activation"])
    want = gen.kernel_args(plan)
    yield "padded intermediate", torch.tensor([P]), lambda: torch.tensor([plan.intermediate_size_per_partition_padded])
    yield "kernel intermediate_pad", torch.tensor([pads["intermediate_pad"]]), \
        lambda: torch.tensor([want["intermediate_pad"]])
    yield "kernel hidden_pad", torch.tensor([pads["hidden_pad"]]), lambda: torch.tensor([want.get("hidden_pad", 0)])
    g = torch.Generator().manual_seed(0)
    w1, w3 = torch.randn(E, I, H, generator=g).to(td), torch.randn(E, I, H, generator=g).to(td)
    w2 = torch.randn(E, H, I, generator=g).to(td)
    for rank in range(tp):
        # torch.empty-like parameters (vLLM allocates them so): NaN, poisoned or not
        w13_p = vllm_load_w13(config, poisoned((E, 2 * P, H), td), w1, w3, rank)
        w2_p = vllm_load_w2(config, poisoned((E, H, P), td), w2, rank)
        unq._zero_intermediate_padding(config, w13_p, w2_p)
        yield f"w13 rank {rank}", w13_p, lambda r=rank: gen.shard_w13(torch.cat([w1, w3], 1), r, plan)
        yield f"w2 rank {rank}", w2_p, lambda r=rank: gen.shard_w2(w2, r, plan)
