"""Quantized checkpoints through vLLM 0.32's own loading, against layoutc's per-rank loaders.

For each quantized method, a random packed checkpoint (every byte position distinguishable)
is loaded for every rank of tp 1, 2, 4 and 8 twice:

- vLLM: the method itself (`AutoGPTQMoEMethod`, `AutoAWQMoEMethod`, `Fp8MoEMethod`,
  `GptOssModel._load_weights_mxfp4` with `Mxfp4MoEMethod`'s parameters) creates its parameters
  (`create_weights`, with its `quant_method` / `is_transposed` / `weight_loader` attributes) on a
  module carrying `RoutedExperts`' own loading methods (`oracle.routed_experts_stub`), the
  checkpoint goes through `RoutedExperts.weight_loader` one expert and projection at a time,
  and then the method's `process_weights_after_loading` runs on CPU up to the first op that
  needs a GPU, which is replaced by a stop that records what it was handed
  (`oracle.run_until_gpu_op`). The test id and a comment name that op.
- layoutc: the generated `alloc_*` + `load_*` (per expert, per role, from the checkpoint's own
  tensors) and `shard_*` (from the stacked full checkpoint).

The three must be equal bit for bit (`torch.equal` on the stored dtype, FP8 and E8M0 compared as
bytes).

What is patched, and nothing else in vLLM:
- device probes: `MarlinExperts._supports_current_device` (current_platform is CUDA with
  capability 7.5), `CPUExpertsMxfp4._supports_current_device` (an AMX CPU) and
  `TrtLlmMxfp4ExpertsMonolithic._supports_current_device` (Blackwell), so that the backend named
  by `moe_backend` ("marlin", "cpu", "flashinfer_trtllm", as --moe-backend gives it) is selected;
- the op each run stops at (replaced by the stop, never executed); `flashinfer`, a CUDA library
  not installable here, is a stub package whose functions are those stops;
- what a single process has no answer for: the TP world size Fp8MoEMethod reads, gpt-oss's
  distributed groups (as oracle.gpt_oss_mxfp4_rank_rows patches them), and the engine config
  select_mxfp4_moe_backend reads for a user activation override (none given).
The layer is `oracle.routed_experts_stub`: RoutedExperts' own loading methods on a bare module
(RoutedExperts.__init__ needs an engine).

Pinned:
- vLLM wrong, compared with the corrected rule: GPTQ's expert w2 bias on every rank
  (known.py `gptq_w2_bias_every_rank`).
- vLLM wrong, compared with the corrected rule: AWQ channelwise (group -1), which vLLM's
  Marlin gate admits and AutoAWQMoEMethod.create_weights cannot allocate (a negative group
  count): its scales and zero points are allocated as AutoGPTQMoEMethod does for -1 (known.py
  `awq_channelwise_create_weights`, `_awq_channelwise_create_weights`); the gate against the
  contract's plan in `test_awq_channelwise_admission_matches_vllm_gate`.
- the contracts' decode of the stored codes and AWQ's nibble order (`pack 8 order (...)`):
  `test_contract_*`.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import types
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import torch

from tests.support.conformance import oracle
from tests.support.conformance.known import KNOWN

pytestmark = pytest.mark.conformance

TP = (1, 2, 4, 8)
E = 2  # experts: enough to see an expert offset
H = 256  # Marlin needs hidden_size % 128 == 0
I_SIZES = (704, 1024)  # 704: 176 per rank at tp 4, unaligned to 128; 1024 admits group 128 at every tp


def _rand_int32(*shape: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32, generator=gen)


def _rand(*shape: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Random finite values of `dtype`, distinct with high probability (and never 0 or 1,
    so a pad or a unit-scale tail cannot pass for a loaded value)."""
    return (torch.rand(shape, generator=gen) + 2.0).to(dtype)


@dataclasses.dataclass
class Count:
    """Per-(method, tp) tally for the report: configurations compared / refused by both, and
    tensors compared bit for bit (per rank, per tensor, both layoutc paths)."""

    compared: int = 0
    refused: int = 0
    tensors: int = 0
    pinned: int = 0  # tensors compared with the corrected rule (a pinned vLLM bug)


@contextlib.contextmanager
def _marlin_device() -> Iterator[None]:
    """The device probe only: MarlinExperts._supports_current_device (current_platform is CUDA
    with capability 7.5) answers True on this CPU host."""
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExperts

    with mock.patch.object(MarlinExperts, "_supports_current_device", staticmethod(lambda: True)):
        yield


# ---- GPTQ int4 / int8 and AWQ int4 (Marlin WNA16) ---------------------------------------------


def _wna16_checkpoint(fmt: str, bits: int, g: int, I: int, seed: int) -> dict[str, dict[str, list[torch.Tensor]]]:
    """A random GPTQ or AWQ checkpoint in the format's stored shapes, keyed for
    oracle.load_experts. GPTQ: qweight [K / pf, N] packed along K, qzeros [G, N / pf],
    scales [G, N] float16, bias [N]; AWQ: qweight [K, N / 8] packed along N, qzeros [G, N / 8],
    scales [G, N] (N the projection's output size, K its input size)."""
    gen = torch.Generator().manual_seed(seed)
    pf = 32 // bits

    def proj(n: int, k: int) -> dict[str, torch.Tensor]:
        groups = 1 if g == -1 else k // g
        t = {"qweight": _rand_int32(k // pf, n, gen=gen) if fmt == "gptq" else _rand_int32(k, n // pf, gen=gen),
             "scales": _rand(groups, n, dtype=torch.float16, gen=gen),
             "qzeros": _rand_int32(groups, n // pf, gen=gen)}
        if fmt == "gptq":
            t["bias"] = _rand(n, dtype=torch.float16, gen=gen)
        return t

    experts = [{"w1": proj(I, H), "w3": proj(I, H), "w2": proj(H, I)} for _ in range(E)]
    return {f"{stem}_{suffix}": {sid: [experts[e][sid][suffix] for e in range(E)] for sid in sids}
            for stem, sids in (("w13", ("w1", "w3")), ("w2", ("w2",))) for suffix in experts[0]["w1"]}


def _wna16_quant_config(fmt: str, bits: int, g: int, act_order: bool) -> Any:
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig
    from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig

    if fmt == "awq":
        return AutoAWQConfig(weight_bits=4, group_size=g, zero_point=True, lm_head_quantized=False)
    return AutoGPTQConfig(weight_bits=bits, group_size=g, desc_act=act_order, is_sym=True, lm_head_quantized=False,
                          dynamic={}, full_config={})


def _vllm_wna16_rank(fmt: str, bits: int, g: int, act_order: bool, I: int, tp: int, rank: int,
                     checkpoint: dict[str, dict[str, list[torch.Tensor]]]) -> dict[str, torch.Tensor] | None:
    """vLLM's tensors for one rank at the first GPU-only op of process_weights_after_loading
    (ops.gptq_marlin_moe_repack / ops.awq_marlin_moe_repack on w13's padded qweight), keyed by
    layoutc's tensor names; None when vLLM refuses the layer (config, method or create_weights)."""
    from vllm.model_executor.layers.fused_moe.oracle import int_wna16
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQMoEMethod
    from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQMoEMethod

    ok, quant = oracle.call_or_reject(_wna16_quant_config, fmt, bits, g, act_order)
    if not ok:
        return None
    ok, config = oracle.call_or_reject(oracle.moe_config, num_experts=E, hidden_size=H, intermediate_size=I,
                                       tp_size=tp, dtype=torch.float16, moe_backend="marlin")
    if not ok:
        return None
    config = oracle.rank_config(config, rank)
    cls = AutoAWQMoEMethod if fmt == "awq" else AutoGPTQMoEMethod
    with _marlin_device():
        ok, method = oracle.call_or_reject(cls, quant, config)
    if not ok or method.wna16_moe_backend != int_wna16.WNA16MoEBackend.MARLIN:
        return None
    layer = oracle.routed_experts_stub(config, quant, method)
    create = functools.partial(_awq_channelwise_create_weights, method) if fmt == "awq" and g == -1 \
        else method.create_weights
    ok, _ = oracle.call_or_reject(create, layer, E, H, config.intermediate_size_per_partition,
                                  torch.float16, weight_loader=layer.weight_loader)
    if not ok:
        return None
    oracle.load_experts(layer, checkpoint)
    op = "awq_marlin_moe_repack" if fmt == "awq" else "gptq_marlin_moe_repack"
    stop = oracle.run_until_gpu_op(lambda: method.process_weights_after_loading(layer), int_wna16.ops, op)
    loc = stop.caller
    if fmt == "awq":  # _process_awq_weights_marlin: padded in place of its arguments' names
        return {"w13_qweight": stop.args[0], "w2_qweight": loc["w2_qweight"], "w13_scales": loc["w13_scales"],
                "w2_scales": loc["w2_scales"], "w13_qzeros": loc["w13_qzeros"], "w2_qzeros": loc["w2_qzeros"]}
    return {"w13_qweight": stop.args[0], "w2_qweight": loc["marlin_w2_qweight"],
            "w13_scales": loc["marlin_w13_scales"], "w2_scales": loc["marlin_w2_scales"],
            "w13_qzeros": loc["w13_qzeros"], "w2_qzeros": loc["w2_qzeros"], "w13_bias": loc["w13_bias"],
            "w2_bias": loc["w2_bias"]}


#: vLLM's Marlin gate admits AWQ channelwise, whose create_weights then fails (docs/kernels.md 8.2)
AWQ_CHANNELWISE = "awq_channelwise_create_weights"


def _awq_channelwise_create_weights(method: Any, layer: Any, num_experts: int, hidden_size: int, i_pp: int,
                                    params_dtype: torch.dtype, **extra_weight_attrs: Any) -> None:
    """AutoAWQMoEMethod.create_weights for group_size -1, with the corrected rule (pinned
    vllm-bug `awq_channelwise_create_weights`): vLLM 0.32 sizes the groups as
    hidden_size // group_size, which is negative at -1 (`torch.empty` raises RuntimeError), so
    the method runs with its quant config's group_size at hidden_size (one w13 group; the
    weights do not depend on it), and the four group tensors are then allocated as
    AutoGPTQMoEMethod.create_weights allocates them for -1: one group along K
    (scales_size13 = scales_size2 = 1), strategy CHANNEL, so that RoutedExperts.weight_loader
    reads them with its per-channel loader (_load_per_channel_weight_scale: w13 sharded along
    N, w2 whole on every rank). Everything after (loading, process_weights_after_loading with
    group_size -1) is vLLM's own."""
    from vllm.model_executor.layers.fused_moe.routed_experts import FusedMoeWeightScaleSupported
    from vllm.model_executor.layers.linear import set_weight_attrs

    quant = method.quant_config
    with mock.patch.object(quant, "group_size", hidden_size):
        method.create_weights(layer, num_experts, hidden_size, i_pp, params_dtype, **extra_weight_attrs)
    assert KNOWN[AWQ_CHANNELWISE][0] == "vllm-bug"
    pf, n13 = quant.pack_factor, method.moe.w13_num_shards * i_pp
    attrs = {**extra_weight_attrs, "is_transposed": True, "quant_method": FusedMoeWeightScaleSupported.CHANNEL.value}
    for name, cols, dtype in (("w13_scales", n13, params_dtype), ("w2_scales", hidden_size, params_dtype),
                              ("w13_qzeros", n13 // pf, torch.int32), ("w2_qzeros", hidden_size // pf, torch.int32)):
        param = torch.nn.Parameter(torch.empty(num_experts, 1, cols, dtype=dtype), requires_grad=False)
        delattr(layer, name)
        layer.register_parameter(name, param)
        set_weight_attrs(param, attrs)
    layer.num_groups_w13 = layer.num_groups_w2 = 1


def _layoutc_rank(module: Any, plan: Any, rank: int, checkpoint: dict[str, dict[str, list[torch.Tensor]]],
                  names: list[str], n_dim: int = -1) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """layoutc's padded tensors for `rank`, two ways: alloc_* + load_* fed each expert's own
    checkpoint tensor (role "gate" / "up" for w1 / w3), and shard_* of the stacked checkpoint
    ([gate | up] along w13's intermediate axis, dim `n_dim` of one expert's tensor: -1 for
    GPTQ/AWQ's K-first tensors, 0 for N-first ones)."""
    roles = {"w1": "gate", "w3": "up", "w2": None}
    loaded, sharded = {}, {}
    for name in names:
        shards = checkpoint[name]
        dst = getattr(module, f"alloc_{name}")(plan, rank)
        for sid, per_expert in shards.items():
            for e, src in enumerate(per_expert):
                getattr(module, f"load_{name}")(dst, src, plan, rank, expert=e, role=roles[sid])
        loaded[name] = dst
        if name.startswith("w13"):
            full = torch.stack([torch.cat([shards["w1"][e], shards["w3"][e]], n_dim) for e in range(E)])
        else:
            full = torch.stack(shards["w2"])
        sharded[name] = getattr(module, f"shard_{name}")(full.contiguous(), rank, plan)
    return loaded, sharded


def _compare(where: str, vllm: dict[str, torch.Tensor], *ours: dict[str, torch.Tensor]) -> int:
    """Assert each of layoutc's tensors equals vLLM's bit for bit; returns the tensors compared."""
    n = 0
    for got in ours:
        assert set(got) == set(vllm), (where, sorted(got), sorted(vllm))
        for name, want in vllm.items():
            a, b = got[name], want
            if a.dtype in (torch.float8_e4m3fn,):
                a, b = a.view(torch.uint8), b.view(torch.uint8)
            assert a.dtype == b.dtype and a.shape == b.shape, (where, name, a.dtype, b.dtype, a.shape, b.shape)
            assert torch.equal(a, b), (where, name)
            n += 1
    return n


#: vLLM's generic loader gives every rank the whole w2 bias (docs/kernels.md 8.2)
W2_BIAS = "gptq_w2_bias_every_rank"

WNA16 = {
    # id -> (contract, format, bits, group sizes, act_order values)
    "gptq_int4": ("marlin_moe_wna16", "gptq", 4, (-1, 32, 64, 128), (False, True)),
    "gptq_int8": ("marlin_moe_gptq_int8", "gptq", 8, (-1, 32, 64, 128), (False,)),
    "awq_int4": ("marlin_moe_awq", "awq", 4, (-1, 32, 64, 128), (False,)),
}


# Stops at ops.gptq_marlin_moe_repack (GPTQ) / ops.awq_marlin_moe_repack (AWQ): the first GPU
# op of int_wna16._process_weights_marlin / _process_awq_weights_marlin, after its transposes
# and pads (_pad_w13_shard_cols, _pad_rows, _pad_w13_bias).
@pytest.mark.slow
@pytest.mark.parametrize("tp", TP)
@pytest.mark.parametrize("case", sorted(WNA16), ids=lambda c: f"{c}-stop_at_{'awq' if 'awq' in c else 'gptq'}_marlin_moe_repack")
def test_wna16_rank_tensors_match_vllm_loading(gen, case: str, tp: int) -> None:  # type: ignore[no-untyped-def]
    contract, fmt, bits, groups, act_orders = WNA16[case]
    module = gen[contract]
    count = Count()
    for I, g, act_order in itertools.product(I_SIZES, groups, act_orders):
        extra = {"act_order": act_order} if contract == "marlin_moe_wna16" else {}
        plan = oracle.plan_or_none(module, num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp,
                                   group_size=g, activation="silu", dtype="float16", **extra)
        checkpoint = _wna16_checkpoint(fmt, bits, g, I, seed=I * 1000 + g * 10 + tp)
        for rank in range(tp):
            where = f"{case} I={I} g={g} act_order={act_order} tp={tp} rank={rank}"
            vllm = _vllm_wna16_rank(fmt, bits, g, act_order, I, tp, rank, checkpoint)
            assert (vllm is None) == (plan is None), f"{where}: vllm admits={vllm is not None} layoutc={plan is not None}"
            if vllm is None:
                count.refused += rank == 0
                continue
            count.compared += rank == 0
            if rank > 0 and "w2_bias" in vllm:
                # pinned vllm-bug gptq_w2_bias_every_rank: vLLM's generic loader copies the whole
                # w2 bias into every rank, so the row-parallel sum adds it tp times; the corrected
                # rule (layoutc's, and gpt-oss's own loader's) keeps it on rank 0 only
                assert torch.equal(vllm["w2_bias"], torch.stack(checkpoint["w2_bias"]["w2"])), where
                assert KNOWN[W2_BIAS][0] == "vllm-bug"
                count.pinned += 1
                vllm["w2_bias"] = torch.zeros_like(vllm["w2_bias"])
            loaded, sharded = _layoutc_rank(module, plan, rank, checkpoint, sorted(vllm))
            compared = _compare(where, vllm, loaded, sharded)
            count.tensors += compared
            if fmt == "awq" and g == -1:  # pinned vllm-bug awq_channelwise_create_weights: the corrected rule
                count.pinned += compared
    print(f"{case} tp={tp}: {count}")
    assert count.compared >= 1 and count.tensors >= count.compared * tp * 2 * 6
    # the pinned disagreements are seen exactly where they exist: GPTQ's biases at tp > 1, AWQ's
    # channelwise scales and zero points at every tp
    assert (count.pinned > 0) == ((fmt == "gptq" and tp > 1) or (fmt == "awq" and -1 in groups)), count


# ---- block FP8, DeepSeek-V3 / MiniMax-M2 style (weight float8_e4m3fn + 128x128 weight_scale_inv) ----

FP8_H = 512
FP8_I = (704, 1536, 2048)  # 1536 at tp 8: 192 per rank, TP-shard padded to 256 (MiniMax-M2's numbers)


def _fp8_bytes(*shape: int, gen: torch.Generator) -> torch.Tensor:
    """Random float8_e4m3fn codes, every byte but the NaN ones (0x7F / 0xFF) possible."""
    b = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
    b[(b & 0x7F) == 0x7F] = 0x3C
    return b.view(torch.float8_e4m3fn)


def _fp8_checkpoint(I: int, seed: int) -> dict[str, dict[str, list[torch.Tensor]]]:
    """Per expert: gate/up weight [I, H] and down weight [H, I] float8_e4m3fn, their
    weight_scale_inv [ceil(N / 128), ceil(K / 128)] float32 (DeepSeek-V3's format)."""
    gen = torch.Generator().manual_seed(seed)

    def proj(n: int, k: int) -> dict[str, torch.Tensor]:
        return {"weight": _fp8_bytes(n, k, gen=gen),
                "weight_scale_inv": _rand(-(-n // 128), -(-k // 128), dtype=torch.float32, gen=gen)}

    experts = [{"w1": proj(I, FP8_H), "w3": proj(I, FP8_H), "w2": proj(FP8_H, I)} for _ in range(E)]
    return {f"{stem}_{suffix}": {sid: [experts[e][sid][suffix] for e in range(E)] for sid in sids}
            for stem, sids in (("w13", ("w1", "w3")), ("w2", ("w2",))) for suffix in ("weight", "weight_scale_inv")}


@contextlib.contextmanager
def _fp8_marlin_world(tp: int) -> Iterator[None]:
    """The device probe (MarlinExperts._supports_current_device) and the TP world size that
    Fp8MoEMethod.create_weights / validate_fp8_block_shape_moe read (no process group here)."""
    import vllm.distributed as dist
    from vllm.model_executor.layers.quantization import fp8 as fp8_method

    with _marlin_device(), mock.patch.object(dist, "get_tensor_model_parallel_world_size", return_value=tp), \
            mock.patch.object(fp8_method, "get_tensor_model_parallel_world_size", return_value=tp):
        yield


def _vllm_fp8_rank(I: int, tp: int, rank: int,
                   checkpoint: dict[str, dict[str, list[torch.Tensor]]]) -> dict[str, torch.Tensor] | None:
    """vLLM's block-FP8 tensors for one rank at the first GPU-only op of
    Fp8MoEMethod.process_weights_after_loading with the Marlin backend: ops.gptq_marlin_repack
    in prepare_fp8_moe_layer_for_marlin, after its tile pads (_moe_pad_shard_rows,
    _moe_pad_last). The scales are the loaded weight_scale_inv (vLLM converts them to
    per-column scales only after that op). None when vLLM refuses the layer."""
    from vllm.model_executor.layers.fused_moe.oracle import fp8 as fp8_oracle
    from vllm.model_executor.layers.quantization import fp8 as fp8_method
    from vllm.model_executor.layers.quantization.utils import marlin_utils_fp8

    ok, config = oracle.call_or_reject(oracle.moe_config, num_experts=E, hidden_size=FP8_H, intermediate_size=I,
                                       tp_size=tp, moe_backend="marlin")
    if not ok:
        return None
    quant = fp8_method.Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic",
                                 weight_block_size=[128, 128])
    shell = torch.nn.Module()
    with _fp8_marlin_world(tp):
        shell.moe_config = config  # Fp8MoEMethod.__init__ resolves the block shape, which may pad the TP shard
        ok, method = oracle.call_or_reject(fp8_method.Fp8MoEMethod, quant, shell)
        if not ok or method.fp8_backend != fp8_oracle.Fp8MoeBackend.MARLIN:
            return None
        config = oracle.rank_config(shell.moe_config, rank)
        layer = oracle.routed_experts_stub(config, quant, method)
        ok, _ = oracle.call_or_reject(method.create_weights, layer, E, FP8_H, config.intermediate_size_per_partition,
                                      torch.bfloat16, weight_loader=layer.weight_loader)
        if not ok:
            return None
        oracle.load_experts(layer, checkpoint)
        stop = oracle.run_until_gpu_op(lambda: method.process_weights_after_loading(layer), marlin_utils_fp8.ops,
                                       "gptq_marlin_repack")
    prepare = next(f for f in stop.outer if "w2_weight" in f and "padded_n" in f)  # prepare_fp8_moe_layer_for_marlin
    return {"w13_weight": prepare["w13_weight"], "w2_weight": prepare["w2_weight"],
            "w13_weight_scale": layer.w13_weight_scale_inv.data, "w2_weight_scale": layer.w2_weight_scale_inv.data}


def _fp8_layoutc_rank(module: Any, plan: Any, rank: int,
                      checkpoint: dict[str, dict[str, list[torch.Tensor]]]) -> tuple[dict[str, torch.Tensor], ...]:
    """layoutc's tensors under vLLM's checkpoint names (scales: `*_weight_scale_inv`)."""
    renamed = {k.replace("_scale_inv", "_scale"): v for k, v in checkpoint.items()}
    return _layoutc_rank(module, plan, rank, renamed, sorted(renamed), n_dim=0)


# Stops at ops.gptq_marlin_repack in marlin_utils_fp8.prepare_fp8_moe_layer_for_marlin (called by
# convert_to_fp8_moe_kernel_format for Fp8MoeBackend.MARLIN), after the Marlin tile pads.
@pytest.mark.parametrize("tp", TP)
def test_block_fp8_rank_tensors_match_vllm_loading_stop_at_gptq_marlin_repack(gen, tp: int) -> None:  # type: ignore[no-untyped-def]
    module = gen["marlin_moe_fp8"]
    count = Count()
    for I in FP8_I:
        plan = oracle.plan_or_none(module, num_experts=E, hidden_size=FP8_H, intermediate_size=I, tp_size=tp,
                                   scheme="fp8_block128", scale_dtype="float32", activation="silu")
        checkpoint = _fp8_checkpoint(I, seed=I + tp)
        for rank in range(tp):
            where = f"block_fp8 I={I} tp={tp} rank={rank}"
            vllm = _vllm_fp8_rank(I, tp, rank, checkpoint)
            assert (vllm is None) == (plan is None), f"{where}: vllm admits={vllm is not None} layoutc={plan is not None}"
            if vllm is None:
                count.refused += rank == 0
                continue
            count.compared += rank == 0
            count.tensors += _compare(where, vllm, *_fp8_layoutc_rank(module, plan, rank, checkpoint))
    print(f"block_fp8 tp={tp}: {count}")
    assert count.compared >= 1


# ---- gpt-oss MXFP4 (`*_blocks` e2m1 nibbles, `*_scales` E8M0, interleaved gate/up, biases) ----

MX_H = 256
MX_I = (704, 2880)  # 704: 22 blocks of 32, so tp 4 / 8 have a short last rank; 2880: gpt-oss itself


def _mxfp4_checkpoint(I: int, seed: int) -> dict[str, torch.Tensor]:
    """gpt-oss's expert tensors as the model's name mapping hands them to _load_weights_mxfp4:
    w13_weight [E, 2I, H / 32, 16] uint8 (gate_up_proj_blocks, rows interleaved gate, up),
    w13_weight_scale [E, 2I, H / 32] E8M0 bytes (no 255: NaN), w13_bias [E, 2I] bfloat16,
    w2_weight [E, H, I / 32, 16], w2_weight_scale [E, H, I / 32], w2_bias [E, H]."""
    gen = torch.Generator().manual_seed(seed)

    def u8(*shape: int, high: int = 256) -> torch.Tensor:
        return torch.randint(0, high, shape, dtype=torch.uint8, generator=gen)

    return {"w13_weight": u8(E, 2 * I, MX_H // 32, 16), "w13_weight_scale": u8(E, 2 * I, MX_H // 32, high=255),
            "w13_bias": _rand(E, 2 * I, dtype=torch.bfloat16, gen=gen),
            "w2_weight": u8(E, MX_H, I // 32, 16), "w2_weight_scale": u8(E, MX_H, I // 32, high=255),
            "w2_bias": _rand(E, MX_H, dtype=torch.bfloat16, gen=gen)}


@contextlib.contextmanager
def _cpu_mxfp4_device() -> Iterator[None]:
    """The device probe CPUExpertsMxfp4._supports_current_device (an AMX CPU) answers True, and
    the engine config select_mxfp4_moe_backend reads for a user activation override
    (get_current_vllm_config().model_config.quantization_config) is "none given": there is
    no engine here."""
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as mxfp4_oracle

    engine = types.SimpleNamespace(model_config=types.SimpleNamespace(quantization_config=None))
    with mock.patch.object(cpu_moe.CPUExpertsMxfp4, "_supports_current_device", staticmethod(lambda: True)), \
            mock.patch.object(mxfp4_oracle, "get_current_vllm_config", return_value=engine):
        yield


@contextlib.contextmanager
def _flashinfer_trtllm_device() -> Iterator[Any]:
    """The device probe TrtLlmMxfp4ExpertsMonolithic._supports_current_device (a Blackwell GPU)
    answers True, and `flashinfer` (a CUDA library, not installed on this CPU host) is a stub
    package whose functions are never run: the first one called is the stop. Yields the stub
    `flashinfer.fused_moe.core`."""
    import sys

    from vllm.model_executor.layers.fused_moe.experts import trtllm_mxfp4_moe

    def unused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a flashinfer stub function ran")

    stubs = {name: types.ModuleType(name) for name in
             ("flashinfer", "flashinfer.fp4_quantization", "flashinfer.fused_moe", "flashinfer.fused_moe.core")}
    stubs["flashinfer.fp4_quantization"].nvfp4_block_scale_interleave = unused  # type: ignore[attr-defined]
    stubs["flashinfer.fused_moe.core"].get_w2_permute_indices_with_cache = unused  # type: ignore[attr-defined]
    with mock.patch.object(trtllm_mxfp4_moe.TrtLlmMxfp4ExpertsMonolithic, "_supports_current_device",
                           staticmethod(lambda: True)), mock.patch.dict(sys.modules, stubs):
        yield stubs["flashinfer.fused_moe.core"]


def _vllm_gpt_oss_rank(backend: str, I: int, tp: int, rank: int,
                       checkpoint: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """vLLM's gpt-oss MXFP4 tensors for one rank: GptOssMxfp4MoEMethod (backend "cpu" or
    "flashinfer_trtllm", as --moe-backend selects it), its maybe_roundup_sizes and
    create_weights, _load_weights_mxfp4 through RoutedExperts.weight_loader (its gpt_oss_mxfp4
    branch), then process_weights_after_loading up to the first op the host cannot run:
    - cpu: torch.ops._C.convert_weight_packed in cpu_moe.prepare_mxfp4_moe_layer_for_cpu (the
      AMX VNNI prepack; the CPU backend has no GPU op). The biases: vLLM casts them to float32
      right after it (the contract's storage); bf16 -> fp32 is exact, so the cast is applied here.
    - flashinfer_trtllm: flashinfer's get_w2_permute_indices_with_cache (the TRT-LLM shuffle) in
      convert_gpt_oss_weight_to_mxfp4_moe_kernel_format, after its float32 bias cast and
      swap_every_two_rows (gate, up) -> (up, gate)."""
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as mxfp4_oracle
    from vllm.model_executor.layers.quantization.mxfp4 import GptOssMxfp4Config, GptOssMxfp4MoEMethod

    config = oracle.rank_config(oracle.moe_config(num_experts=E, hidden_size=MX_H, intermediate_size=I, tp_size=tp,
                                                  activation_name="swigluoai", has_bias=True, moe_backend=backend),
                                rank)
    with _cpu_mxfp4_device(), (_flashinfer_trtllm_device() if backend != "cpu" else contextlib.nullcontext()) as fi:
        method = GptOssMxfp4MoEMethod(config)
        want = {"cpu": mxfp4_oracle.Mxfp4MoeBackend.CPU,
                "flashinfer_trtllm": mxfp4_oracle.Mxfp4MoeBackend.FLASHINFER_TRTLLM_MXFP4_BF16}[backend]
        assert method.mxfp4_backend == want, method.mxfp4_backend
        hidden, i_pp = method.maybe_roundup_sizes(MX_H, config.intermediate_size_per_partition, torch.bfloat16,
                                                  config.moe_parallel_config)
        layer = oracle.routed_experts_stub(config, GptOssMxfp4Config(), method)
        method.create_weights(layer, E, hidden, i_pp, torch.bfloat16, weight_loader=layer.weight_loader)
        oracle.gpt_oss_load_mxfp4(layer, checkpoint, I, tp, rank)
        process = lambda: method.process_weights_after_loading(layer)  # noqa: E731
        if backend == "cpu":
            stop = oracle.run_until_gpu_op(process, torch.ops._C, "convert_weight_packed")
            prepare, convert = stop.caller, stop.outer[0]  # prepare_mxfp4_moe_layer_for_cpu, its caller
            return {"w13_weight": prepare["w13"], "w2_weight": prepare["w2"], "w13_weight_scale": prepare["w13_scale"],
                    "w2_weight_scale": prepare["w2_scale"], "w13_bias": convert["w13_bias"].data.to(torch.float32),
                    "w2_bias": convert["w2_bias"].data.to(torch.float32)}
        loc = oracle.run_until_gpu_op(process, fi, "get_w2_permute_indices_with_cache").caller
        return {n: loc[n] for n in ("w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale", "w13_bias",
                                    "w2_bias")}


def _mxfp4_layoutc_rank(module: Any, contract: str, plan: Any, rank: int,
                        checkpoint: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """layoutc's tensors from the checkpoint's bytes (blocks flattened to [E, N, K / 2], as
    the safetensors reader views them), the biases as float32 (the contract's storage), three
    ways: "fused" (alloc_* + load_* of the fused interleaved (gate, up) source, every expert at
    once, source_layout="interleave"), "per_role" (the source's even rows as role "gate", its odd
    rows as "up") and "shard" (shard_* of the full tensor in the contract's own pair order: the
    checkpoint's (gate, up) pairs swapped where the contract states (up, gate))."""
    flat = {n: (t.flatten(2) if t.ndim == 4 else t) for n, t in checkpoint.items()}
    flat = {n: (t.to(torch.float32) if "bias" in n else t).contiguous() for n, t in flat.items()}
    up_first = _contract_tensor(contract, "w13_weight").axis("n").roles == ("up", "gate")
    out: dict[str, dict[str, torch.Tensor]] = {"fused": {}, "per_role": {}, "shard": {}}
    for name, src in flat.items():
        alloc, load = getattr(module, f"alloc_{name}"), getattr(module, f"load_{name}")
        full = src
        if name.startswith("w13"):
            gate, up = src[:, 0::2].contiguous(), src[:, 1::2].contiguous()
            dst = alloc(plan, rank)
            load(dst, gate, plan, rank, role="gate")
            load(dst, up, plan, rank, role="up")
            out["per_role"][name] = dst
            if up_first:
                full = torch.stack([up, gate], 2).flatten(1, 2).contiguous()
        dst = alloc(plan, rank)
        load(dst, src, plan, rank, **({"source_layout": "interleave"} if name.startswith("w13") else {}))
        out["fused"][name] = dst
        if not name.startswith("w13"):
            out["per_role"][name] = dst
        out["shard"][name] = getattr(module, f"shard_{name}")(full, rank, plan)
    return out


# Stops at torch.ops._C.convert_weight_packed (cpu: the AMX prepack) / flashinfer's
# get_w2_permute_indices_with_cache (flashinfer_trtllm: the TRT-LLM shuffle); see _vllm_gpt_oss_rank.
MXFP4_CASES = {"cpu": "vllm_cpu_mxfp4_gpt_oss_moe", "flashinfer_trtllm": "flashinfer_trtllm_mxfp4_moe"}
MXFP4_STOP = {"cpu": "convert_weight_packed", "flashinfer_trtllm": "get_w2_permute_indices_with_cache"}


@pytest.mark.slow
@pytest.mark.parametrize("tp", TP)
@pytest.mark.parametrize("backend", sorted(MXFP4_CASES), ids=lambda b: f"{b}-stop_at_{MXFP4_STOP[b]}")
def test_gpt_oss_mxfp4_rank_tensors_match_vllm_loading(gen, backend: str, tp: int) -> None:  # type: ignore[no-untyped-def]
    module = gen[MXFP4_CASES[backend]]
    extra = {"activation": "swigluoai"} if backend != "cpu" else {}
    count = Count()
    for I in MX_I:
        plan = module.plan(num_experts=E, hidden_size=MX_H, intermediate_size=I, tp_size=tp, **extra)
        checkpoint = _mxfp4_checkpoint(I, seed=I + tp)
        for rank in range(tp):
            vllm = _vllm_gpt_oss_rank(backend, I, tp, rank, checkpoint)
            ours = _mxfp4_layoutc_rank(module, MXFP4_CASES[backend], plan, rank, checkpoint)
            count.tensors += _compare(f"gpt_oss_mxfp4 {backend} I={I} tp={tp} rank={rank}", vllm,
                                      *(ours[p] for p in ("per_role", "shard", "fused")))
        count.compared += 1
    print(f"gpt_oss_mxfp4 {backend} tp={tp}: {count}")
    assert count.tensors >= len(MX_I) * tp * 6 * 3


def test_gpt_oss_fused_interleaved_source_loads_into_an_up_gate_contract(gen) -> None:  # type: ignore[no-untyped-def]
    """gpt-oss's fused (gate, up) pairs (source_layout="interleave", the default source_roles
    gate first) load into flashinfer_trtllm_mxfp4_moe's (up, gate) pairs swapped, as vLLM's
    swap_every_two_rows leaves them (runtime/loading.py: source segment j into the contract's
    segment of role source_roles[j]; it was copied pair for pair)."""
    module = gen["flashinfer_trtllm_mxfp4_moe"]
    tp, rank, I = 4, 1, 704
    plan = module.plan(num_experts=E, hidden_size=MX_H, intermediate_size=I, tp_size=tp, activation="swigluoai")
    checkpoint = _mxfp4_checkpoint(I, seed=5)
    vllm = _vllm_gpt_oss_rank("flashinfer_trtllm", I, tp, rank, checkpoint)
    ours = _mxfp4_layoutc_rank(module, "flashinfer_trtllm_mxfp4_moe", plan, rank, checkpoint)
    assert torch.equal(ours["per_role"]["w13_weight"], vllm["w13_weight"])  # the oracle and the right path agree
    for name in ("w13_weight", "w13_weight_scale", "w13_bias"):
        assert torch.equal(ours["fused"][name], vllm[name]), name


# ---- the contracts' decode of the stored codes and AWQ's slot order, against vLLM's ----
#
# Loading is bytes: the tests above hold whatever the codes mean. What a code means is the
# contract's `code` range and `decode` (layoutc/compiler/evaluate.py eval_real is the
# verifier's own evaluation of it), and which value a packed slot holds is its axis's
# `pack N order (...)` (the IR's Axis.pack_order); each is held to vLLM's own decoder here.


@functools.cache
def _contract(name: str) -> Any:
    """The checked IR of contracts/<name>.moe (parsed once: the FP8 test decodes 897 codes)."""
    from layoutc.compiler.source import load
    from tests.conformance.conftest import ROOT

    contract, diags, _ = load(str(ROOT / "contracts" / f"{name}.moe"))
    assert contract is not None, diags
    return contract


def _contract_tensor(name: str, tensor: str) -> Any:
    return next(t for t in _contract(name).tensors if t.name == tensor)


def _contract_decodes(name: str, tensor: str, code: int, env: dict[str, Any] | None = None) -> Any:
    """The contract's value of stored code `code` of `tensor`, every tensor its decode reads (the
    scale) at 1, or None where the code is outside its declared `code` range."""
    from fractions import Fraction

    from layoutc.compiler.evaluate import eval_real

    contract = _contract(name)
    t = next(t for t in contract.tensors if t.name == tensor)
    lo, hi = t.code_range
    if not lo <= code <= hi:
        return None
    return eval_real(t.decode, env or {}, Fraction(code), {other.name: Fraction(1) for other in contract.tensors})


def _vllm_e2m1(nibble: int) -> float:
    """vLLM's value of an MXFP4 element nibble at scale 2^0 (E8M0 byte 127), by its CPU-callable
    dequantizer flashinfer_moe_ep._dequant_mxfp4_ue8m0_gran32 (low nibble first)."""
    from vllm.model_executor.layers.fused_moe.flashinfer_moe_ep import _dequant_mxfp4_ue8m0_gran32

    packed = torch.full((1, 16), nibble, dtype=torch.uint8)  # 32 elements, the even ones `nibble`
    return float(_dequant_mxfp4_ue8m0_gran32(packed, torch.full((1, 1), 127, dtype=torch.uint8))[0, 0])


@pytest.mark.parametrize("name", ["vllm_cpu_mxfp4_gpt_oss_moe", "flashinfer_trtllm_mxfp4_moe", "sglang_cpu_mxfp4_moe"])
def test_contract_decode_mxfp4_nibbles_match_vllm(name: str) -> None:
    got = {n: _contract_decodes(name, "w13_weight", n) for n in range(16)}
    want = {n: _vllm_e2m1(n) for n in range(16)}
    assert want[3] == 1.5 and want[9] == -0.5  # the oracle reads E2M1 (not the contract's integers)
    assert got == want


def test_contract_decode_fp8_bytes_match_vllm() -> None:
    finite = torch.tensor([b for b in range(256) if b & 0x7F != 0x7F], dtype=torch.uint8)
    vllm = finite.view(torch.float8_e4m3fn).float()  # what vLLM's Marlin FP8 dequantizes a byte to at unit scale
    t = _contract_tensor("marlin_moe_fp8", "w13_weight")
    lo, hi = t.code_range
    statable = {float(_contract_decodes("marlin_moe_fp8", "w13_weight", c, {"scale_dtype": "float32"}))
                for c in range(lo, hi + 1) if c & 0x7F != 0x7F}  # 0x7F, 0xFF: NaN (no value)
    missing = [float(v) for v in vllm if float(v) not in statable]
    assert len(missing) < 256  # integer-valued bytes (e.g. 0x38 = 1.0) are statable
    assert not missing, f"{len(missing)} of {len(vllm)} finite FP8 bytes have no code, e.g. {missing[:4]}"


def _vllm_awq_element_of_slot() -> tuple[int, ...]:
    """Which of 8 consecutive output channels each 4-bit slot of an AWQ int32 word holds, as
    vLLM reads it (moe_wna16 MoeWNA16Method.get_weight_loader's convert_awq_tensor): a word
    whose slot i holds the value i, unpacked to one code per channel."""
    from tests.tools.test_quant_formats import _wna16_helper

    word = sum(i << (4 * i) for i in range(8))
    qweight = torch.tensor([[word], [word]], dtype=torch.int64).to(torch.int32)  # [K = 2, N / 8 = 1]
    out = _wna16_helper("convert_awq_tensor")(qweight, "qweight")  # [N = 8, K / 2 = 1] uint8
    slot_of_channel = [int(v) & 0xF for v in out[:, 0]]
    return tuple(slot_of_channel.index(i) for i in range(8))


@pytest.mark.parametrize("tensor", ["w13_qweight", "w13_qzeros", "w2_qweight", "w2_qzeros"])
def test_contract_awq_pack_order_matches_vllm(tensor: str) -> None:
    """Every packed axis of marlin_moe_awq states vLLM's AWQ nibble order (`pack 8 order (...)`),
    the weights' and the zero points' alike; the GPTQ contract's packed axes keep the identity."""
    axis = _contract_tensor("marlin_moe_awq", tensor).axis("n")
    assert axis.pack == 8
    vllm = _vllm_awq_element_of_slot()
    assert sorted(vllm) == list(range(8)) and vllm != tuple(range(8))  # the oracle sees an interleave
    assert axis.pack_order == vllm
    assert [axis.slot_of(c) for c in range(8)] == [vllm.index(c) for c in range(8)]
    # the checkpoint format's declaration (what layoutc's AWQ unpacker and quant_run read) and
    # the tests' packer state the same order as the contract
    from layoutc.tools.checkpoints.quant.scheme import AWQ_ORDER
    from tests.support.quant_pack import AWQ_PACK_ORDER

    assert AWQ_ORDER == AWQ_PACK_ORDER == axis.pack_order
    gptq = _contract_tensor("marlin_moe_wna16", "w13_qweight").axis("k")
    assert gptq.pack == 8 and gptq.pack_order == tuple(range(8))



def _element_of_slot(slot_of_element: list[int]) -> tuple[int, ...]:
    """Invert an unpacker's reading: element j came from slot slot_of_element[j]."""
    return tuple(slot_of_element.index(i) for i in range(len(slot_of_element)))


def _vllm_gptq_element_of_slot(bits: int) -> tuple[int, ...]:
    """Which of 32 / bits consecutive values each slot of a GPTQ int32 word holds, as vLLM's
    quant_utils.unpack_quantized_values_into_int32 reads it (a word whose slot i holds i)."""
    from vllm.model_executor.layers.quantization.utils import quant_utils
    from vllm.scalar_type import scalar_types

    pf = 32 // bits
    word = sum(i << (bits * i) for i in range(pf))
    wtype = scalar_types.uint4b8 if bits == 4 else scalar_types.uint8b128
    out = quant_utils.unpack_quantized_values_into_int32(torch.tensor([[word]], dtype=torch.int64).to(torch.int32),
                                                          wtype, packed_dim=1)
    return _element_of_slot([int(v) for v in out[0]])


def _vllm_fp4_element_of_slot(fmt: str) -> tuple[int, ...]:
    """Which of a byte's two E2M1 values each nibble (slot 0: bits 0..3) holds, as vLLM
    decodes it: MXFP4 by flashinfer_moe_ep._dequant_mxfp4_ue8m0_gran32 (scale 2^0), NVFP4 by
    nvfp4_emulation_utils.break_fp4_bytes. The byte 0x21: low nibble E2M1 0.5, high 1.0."""
    packed = torch.full((1, 16), 0x21, dtype=torch.uint8)
    if fmt == "mxfp4":
        from vllm.model_executor.layers.fused_moe.flashinfer_moe_ep import _dequant_mxfp4_ue8m0_gran32

        values = _dequant_mxfp4_ue8m0_gran32(packed, torch.full((1, 1), 127, dtype=torch.uint8))[0, :2]
    else:
        from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import break_fp4_bytes

        values = break_fp4_bytes(packed, torch.float32)[0, :2]
    return _element_of_slot([{0.5: 0, 1.0: 1}[float(v)] for v in values])


#: Every packed axis of a shipped contract and the format whose vLLM unpacker reads it
#: (test_every_packed_axis_has_an_unpacker keeps this complete).
PACKED_AXES = {
    **{("marlin_moe_awq", t, "n"): "awq" for t in ("w13_qweight", "w13_qzeros", "w2_qweight", "w2_qzeros")},
    **{("marlin_moe_wna16", t, a): "gptq_int4" for t, a in (("w13_qweight", "k"), ("w13_qzeros", "n"),
                                                            ("w2_qweight", "k"), ("w2_qzeros", "n"))},
    **{("marlin_moe_gptq_int8", t, a): "gptq_int8" for t, a in (("w13_qweight", "k"), ("w13_qzeros", "n"),
                                                                ("w2_qweight", "k"), ("w2_qzeros", "n"))},
    **{(c, t, "k"): "mxfp4" for c in ("flashinfer_trtllm_mxfp4_moe", "sglang_cpu_mxfp4_moe",
                                      "vllm_cpu_mxfp4_gpt_oss_moe", "vllm_cpu_mxfp4_moe")
       for t in ("w13_weight", "w2_weight")},
    **{("flashinfer_nvfp4_moe", t, "k"): "nvfp4" for t in ("w13_weight", "w2_weight")},
    # compressed-tensors: MXFP4 packs as the other MXFP4 formats (E2M1, low nibble first); pack-quantized
    # int4 / int8 packs GPTQ's codes along the input dim (CompressedTensorsWNA16MoEMethod hands
    # weight_packed, transposed, to the same GPTQ repack)
    **{("marlin_moe_ct_mxfp4", t, "k"): "mxfp4" for t in ("w13_weight", "w2_weight")},
    **{("vllm_ct_wna16_int4_moe", t, "k"): "gptq_int4" for t in ("w13_weight_packed", "w2_weight_packed")},
    **{("vllm_ct_wna16_int8_moe", t, "k"): "gptq_int8" for t in ("w13_weight_packed", "w2_weight_packed")},
}
UNPACKERS = {"awq": _vllm_awq_element_of_slot, "gptq_int4": lambda: _vllm_gptq_element_of_slot(4),
             "gptq_int8": lambda: _vllm_gptq_element_of_slot(8), "mxfp4": lambda: _vllm_fp4_element_of_slot("mxfp4"),
             "nvfp4": lambda: _vllm_fp4_element_of_slot("nvfp4")}


def test_every_packed_axis_has_an_unpacker() -> None:
    """PACKED_AXES names every `pack N` axis of contracts/*.moe, so none states an order no test reads."""
    from tests.conformance.conftest import ROOT

    packed = {(path.stem, t.name, a.name) for path in sorted((ROOT / "contracts").glob("*.moe"))
              for t in _contract(path.stem).tensors for a in t.axes if a.pack > 1}
    assert len(packed) == 28 and packed == set(PACKED_AXES)


@pytest.mark.parametrize("key", sorted(PACKED_AXES), ids=lambda k: ".".join(k))
def test_contract_pack_order_matches_vllm_unpacker(key: tuple[str, str, str]) -> None:
    """Each packed axis's `pack N order (...)` (the identity when none is written) is the slot
    order vLLM's own unpacker reads for its format: AWQ's interleave, GPTQ int4/int8 and the FP4
    formats' identity (E2M1: low nibble first). A contract that stated MXFP4 high nibble first, or
    GPTQ in AWQ's order, passed every other test (no other test reads Axis.pack_order)."""
    contract, tensor, axis_name = key
    want = UNPACKERS[PACKED_AXES[key]]()
    assert sorted(want) == list(range(len(want)))
    axis = _contract_tensor(contract, tensor).axis(axis_name)
    assert (axis.pack, axis.pack_order) == (len(want), want)


# ---- AWQ channelwise (group -1): vLLM's Marlin gate, against marlin_moe_awq's plan ----


def _awq_channelwise_known(I: int, tp: int) -> str | None:
    """The pinned vLLM bug behind a gate decision layoutc does not share: a channelwise shard
    of I / tp rows that is not whole int32 words of 8 AWQ nibbles along w13's packed N."""
    return "awq_channelwise_ipp_not_8" if (I // tp) % 8 else None


@pytest.mark.slow
def test_awq_channelwise_admission_matches_vllm_gate(gen) -> None:  # type: ignore[no-untyped-def]
    """vLLM's Marlin gate and marlin_moe_awq's plan decide alike on AWQ with group_size -1 (one
    scale per output channel) over the Marlin admission sweep's grid (tests/conformance/
    test_marlin.py), both ways, but where a pinned vLLM bug explains it; and vLLM's own
    AutoAWQMoEMethod.create_weights still fails on it (the pinned `awq_channelwise_create_weights`,
    whose corrected rule test_wna16_rank_tensors_match_vllm_loading compares bit for bit)."""
    from vllm.model_executor.layers.fused_moe.oracle import int_wna16
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig, AutoAWQMoEMethod
    from vllm.model_executor.layers.quantization.utils.marlin_utils import marlin_moe_padded_intermediate

    from tests.conformance.test_marlin import ACTS, HIDDEN, INTERMEDIATE

    quant = AutoAWQConfig(weight_bits=4, group_size=-1, zero_point=True, lm_head_quantized=False)
    module = gen["marlin_moe_awq"]
    tally = oracle.Tally()
    admitted = 0
    for H, I, tp, act in itertools.product(HIDDEN, INTERMEDIATE, oracle.effective_tp_degrees(), ACTS):
        tally.decisions += 1
        ok, config = oracle.call_or_reject(oracle.moe_config, hidden_size=H, intermediate_size=I, tp_size=tp,
                                           activation_name=act, dtype=torch.float16)
        vllm = ok and int_wna16._backend_incompatibility_reason(int_wna16.WNA16MoEBackend.MARLIN, config, quant,
                                                                True, True, True) is None
        plan = oracle.plan_or_none(module, num_experts=8, hidden_size=H, intermediate_size=I, tp_size=tp,
                                   group_size=-1, activation=act, dtype="float16")
        admitted += vllm
        if vllm != (plan is not None):
            key = _awq_channelwise_known(I, tp) if vllm else None
            tally.record(key or "unexplained", f"H={H} I={I} tp={tp} {act}: vllm={vllm} layoutc={plan is not None}")
        elif plan is not None:
            tally.sizes += 1
            want = marlin_moe_padded_intermediate(config.intermediate_size_per_partition, -1)
            if want != plan.intermediate_size_per_partition_padded:
                tally.record("unexplained", f"H={H} I={I} tp={tp}: padded vllm={want} "
                             f"layoutc={plan.intermediate_size_per_partition_padded}")
    print(f"awq channelwise: {admitted} admitted by vLLM's Marlin gate;", tally.summary())
    assert admitted > 1000 and tally.sizes > 1000
    assert "unexplained" not in tally.disagreements, tally.summary()
    assert set(tally.disagreements) == {"awq_channelwise_ipp_not_8"}, tally.summary()
    # vLLM's own create_weights on one admitted configuration: the negative group count
    config = oracle.rank_config(oracle.moe_config(num_experts=E, hidden_size=H_AWQ, intermediate_size=1024, tp_size=2,
                                                  dtype=torch.float16, moe_backend="marlin"), 0)
    with _marlin_device():
        method = AutoAWQMoEMethod(quant, config)
    assert method.wna16_moe_backend == int_wna16.WNA16MoEBackend.MARLIN
    layer = oracle.routed_experts_stub(config, quant, method)
    with pytest.raises(RuntimeError, match="negative dimension"):
        method.create_weights(layer, E, H_AWQ, config.intermediate_size_per_partition, torch.float16,
                              weight_loader=layer.weight_loader)
    assert KNOWN[AWQ_CHANNELWISE][0] == "vllm-bug" and KNOWN["awq_channelwise_ipp_not_8"][0] == "vllm-bug"


H_AWQ = H
