"""The outside packers' checkpoints (tests/support/packers.py: llm-compressor's compressed-tensors W4A16 /
W8A16, auto-round's native format) through vLLM 0.32's own loading, against the per-rank tensors
`layoutc run` builds from the same files, at tp 1, 2, 4 and 8, every rank, bit for bit.

vLLM side, for each rank (the layer is `oracle.routed_experts_stub`, RoutedExperts' own loading methods):
- compressed-tensors: `CompressedTensorsConfig.from_config(config.json's quantization_config)` and
  `CompressedTensorsMoEMethod.get_moe_method` (which picks CompressedTensorsWNA16MoEMethod);
  auto-round: the `AutoGPTQMoEMethod(AutoGPTQConfig(bits, group, desc_act=False, sym))` that vLLM 0.32's
  inc/schemes/inc_wna16_scheme.py `_resolve_gptq_moe` builds for it off CPU (on CPU vLLM 0.32 gives an
  auto-round MoE layer UnquantizedFusedMoEMethod: "CPU does not support quantized MoE yet").
  Then `create_weights`, the checkpoint's own tensors through `RoutedExperts.weight_loader` one expert
  and projection at a time, and `process_weights_after_loading` with the Marlin backend run until
  its first GPU op (`ops.gptq_marlin_moe_repack`, after _process_weights_marlin's transposes and pads).
  vLLM 0.32's CPU path has no backend for most of these (tests/conformance/test_vllm_packers_loading.py
  `test_vllm_cpu_backends_for_the_packers_formats` pins which): Marlin is the path that loads all of them.
- Patched: the device probe `MarlinExperts._supports_current_device` only.

layoutc side, from the same checkpoint folder:
- the route `layoutc run` takes (int4 grouped: torch_int4pack_gptq_moe; int8 channelwise:
  torch_int8pack_gptq_moe): quant_run/rank.py / rank8.py `load_rank` over codes.LayerCodes, the
  contract's generated alloc / load. Compared with vLLM's loaded parameters (before processing), their
  int32 words unpacked by compressed-tensors' own `unpack_from_int32` (plus its offset 2^(b-1)), the
  contract's pad rows and columns filled with its declared fill.
- the Marlin contract's generated loaders (quant_run/padded.py load_rank over expert_sources, the path
  `layoutc run` takes where no CPU kernel here takes the format): compared with vLLM's Marlin-stop tensors.
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

from tests.support import packers
from tests.support.conformance import oracle

pytestmark = [pytest.mark.conformance, pytest.mark.transformers]

TP = (1, 2, 4, 8)
PREFIX = "model.layers.0.mlp.experts"
#: case -> (route contract, Marlin contract)
CONTRACTS = {
    "ct_w4a16_g128": ("torch_int4pack_gptq_moe", "marlin_moe_wna16"),
    "ct_w4a16_g32": ("torch_int4pack_gptq_moe", "marlin_moe_wna16"),
    "ct_w4a16_channel": (None, "marlin_moe_wna16"),
    "ct_w8a16_channel": ("torch_int8pack_gptq_moe", "marlin_moe_gptq_int8"),
    "ct_w8a16_g128": (None, "marlin_moe_gptq_int8"),
    "autoround_int4_g128": ("torch_int4pack_gptq_moe", "marlin_moe_wna16"),
    "autoround_int8_channel": ("torch_int8pack_gptq_moe", "marlin_moe_gptq_int8"),
}
#: vLLM's checkpoint suffix -> the parameter suffix RoutedExperts loads it into (make_expert_params_mapping)
CT_PARAMS = {"weight_packed": "weight_packed", "weight_scale": "weight_scale", "weight_shape": "weight_shape"}
GPTQ_PARAMS = {"qweight": "qweight", "scales": "scales", "qzeros": "qzeros"}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Any:
    packers.packers_path()
    return lambda case: packers.checkpoint(case, tmp_path_factory)


def _marlin_device() -> Any:
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import MarlinExperts

    return mock.patch.object(MarlinExperts, "_supports_current_device", staticmethod(lambda: True))


def _checkpoint(folder: Path, suffixes: dict[str, str], experts: int) -> dict[str, dict[str, list[torch.Tensor]]]:
    """The folder's expert tensors keyed for oracle.load_experts: w13_<param> {w1: gate, w3: up}, w2_<param>."""
    from layoutc.tools.checkpoints.reader import Checkpoint

    ckpt = Checkpoint(folder)
    out: dict[str, dict[str, list[torch.Tensor]]] = {}
    for suffix, param in suffixes.items():
        for stem, sid, proj in (("w13", "w1", "gate_proj"), ("w13", "w3", "up_proj"), ("w2", "w2", "down_proj")):
            names = [f"{PREFIX}.{e}.{proj}.{suffix}" for e in range(experts)]
            if all(ckpt.has(n) for n in names):
                out.setdefault(f"{stem}_{param}", {})[sid] = [ckpt.tensor(n) for n in names]
    return out


def _vllm_rank(
    case: str, quant: dict[str, Any], I: int, tp: int, rank: int, checkpoint: dict[str, dict[str, list[torch.Tensor]]]
) -> tuple[Any, dict[str, torch.Tensor], Any]:
    """(method, its loaded parameters by name, the Marlin stop) for one rank."""
    from vllm.model_executor.layers.fused_moe.oracle import int_wna16

    config = oracle.rank_config(
        oracle.moe_config(
            num_experts=packers.EXPERTS,
            hidden_size=packers.HIDDEN,
            intermediate_size=I,
            tp_size=tp,
            dtype=torch.bfloat16,
            moe_backend="marlin",
        ),
        rank,
    )
    with _marlin_device():
        if case.startswith("ct_"):
            from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
                CompressedTensorsConfig,
            )
            from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
                compressed_tensors_moe as ctm,
            )

            qc = CompressedTensorsConfig.from_config(quant)
            layer = oracle.routed_experts_stub(config, qc, None)
            layer.ckpt_gate_proj_name, layer.ckpt_up_proj_name, layer.ckpt_down_proj_name = (
                "gate_proj",
                "up_proj",
                "down_proj",
            )
            method = ctm.CompressedTensorsMoEMethod.get_moe_method(qc, layer, PREFIX)
        else:
            from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig, AutoGPTQMoEMethod

            qc = AutoGPTQConfig(
                weight_bits=quant["bits"],
                group_size=quant["group_size"],
                desc_act=False,
                is_sym=quant["sym"],
                lm_head_quantized=False,
                dynamic={},
                full_config={},
            )
            method = AutoGPTQMoEMethod(qc, config)
            layer = oracle.routed_experts_stub(config, qc, method)
        layer.quant_method = method
        assert type(method).__name__ in ("CompressedTensorsWNA16MoEMethod", "AutoGPTQMoEMethod"), type(method)
        method.create_weights(
            layer,
            packers.EXPERTS,
            packers.HIDDEN,
            config.intermediate_size_per_partition,
            torch.bfloat16,
            weight_loader=layer.weight_loader,
        )
        oracle.load_experts(layer, checkpoint)
        loaded = {n: p.detach().clone() for n, p in layer.named_parameters()}
        stop = oracle.run_until_gpu_op(
            lambda: method.process_weights_after_loading(layer), int_wna16.ops, "gptq_marlin_moe_repack"
        )
    return method, loaded, stop


def _codes(words: torch.Tensor, bits: int, rows: int, cols: int, packed_dim: int) -> torch.Tensor:
    """[E, rows, cols] int32 codes of [E, ...] int32 words, by compressed-tensors' own unpacker."""
    from compressed_tensors.compressors import unpack_from_int32

    return torch.stack(
        [
            unpack_from_int32(w, bits, torch.Size([rows, cols]), packed_dim=packed_dim).to(torch.int32)
            + (1 << (bits - 1))
            for w in words
        ]
    )


def _halves(t: torch.Tensor, n: int, p: int, fill: float) -> torch.Tensor:
    """[E, 2n, ...] ([gate | up]) placed in [E, 2p, ...], each half padded with `fill`."""
    out = torch.full((t.shape[0], 2 * p, *t.shape[2:]), fill, dtype=t.dtype)
    out[:, :n], out[:, p : p + n] = t[:, :n], t[:, n:]
    return out


def _pad_last(t: torch.Tensor, p: int, fill: float) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, p - t.shape[-1]), value=fill) if p > t.shape[-1] else t


def _vllm_route(
    case: str, bits: int, I_pp: int, P: int, H: int, loaded: dict[str, torch.Tensor], fill: int
) -> dict[tuple[str, str], torch.Tensor]:
    """vLLM's loaded tensors of one rank in the route contract's terms: codes [E, 2P, H] / [E, H, P],
    scales [E, 2P, G13] / [E, H, G2], each pad with the contract's fill (codes `fill`, scales 0)."""
    if case.startswith("ct_"):  # N-first [E, N, K / pack], scales [E, N, G]
        w13 = _codes(loaded["w13_weight_packed"], bits, 2 * I_pp, H, 1)
        w2 = _codes(loaded["w2_weight_packed"], bits, H, I_pp, 1)
        s13, s2 = loaded["w13_weight_scale"], loaded["w2_weight_scale"]
    else:  # GPTQ K-first [E, K / pack, N], scales [E, G, N]
        w13 = _codes(loaded["w13_qweight"], bits, H, 2 * I_pp, 0).transpose(1, 2)
        w2 = _codes(loaded["w2_qweight"], bits, I_pp, H, 0).transpose(1, 2)
        s13, s2 = loaded["w13_scales"].transpose(1, 2), loaded["w2_scales"].transpose(1, 2)
    return {
        ("weight", "w13"): _halves(w13, I_pp, P, fill),
        ("weight", "w2"): _pad_last(w2, P, fill),
        ("scale", "w13"): _halves(s13, I_pp, P, 0),
        ("scale", "w2"): s2,
    }


def _layoutc_route(contract: str, folder: Path, tp: int, r: int) -> tuple[Any, dict[tuple[str, str], torch.Tensor]]:
    """The route contract's plan and rank tensors, as `layoutc run` loads them (quant_run/rank*.py)."""
    import importlib

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.quant.config import read_quantization
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.quant_run import rank as rank4
    from layoutc.tools.quant_run import rank8
    from layoutc.tools.quant_run.codes import LayerCodes
    from layoutc.tools.quant_run.runner import _int4_plan
    from layoutc.tools.runplan import module_layout

    ckpt = Checkpoint(folder)
    moe, scheme = describe(ckpt.config), read_quantization(ckpt.config)
    assert scheme is not None
    layout = module_layout(importlib.import_module(f"layoutc_generated.{contract}"))
    plan = _int4_plan(layout, moe, scheme, tp, "bfloat16")
    codes = LayerCodes(ckpt, moe, scheme, 0)
    if contract == "torch_int4pack_gptq_moe":
        return plan, rank4.load_rank(layout, plan, r, codes, torch.bfloat16).tensors
    return plan, rank8.load_rank(layout, plan, r, codes)


def _layoutc_marlin(contract: str, folder: Path, tp: int, r: int) -> dict[str, torch.Tensor]:
    import importlib

    from layoutc.tools.checkpoints.formats import describe
    from layoutc.tools.checkpoints.quant.config import read_quantization
    from layoutc.tools.checkpoints.reader import Checkpoint
    from layoutc.tools.quant_run import padded
    from layoutc.tools.runplan import module_layout

    ckpt = Checkpoint(folder)
    moe, scheme = describe(ckpt.config), read_quantization(ckpt.config)
    assert scheme is not None
    mod = importlib.import_module(f"layoutc_generated.{contract}")
    layout = module_layout(mod)
    sources = padded.expert_sources(ckpt, moe, scheme, 0)
    plan = layout.plan(**padded.plan_values(layout, moe, scheme, tp, "bfloat16", "bfloat16"))
    return padded.load_rank(layout, padded.contract_ir(mod), plan, r, sources).tensors


def _equal(where: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (where, got.dtype, want.dtype, got.shape, want.shape)
    assert torch.equal(got, want), where


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CONTRACTS))
def test_rank_tensors_match_vllm_loading(written: Any, case: str) -> None:
    folder = written(case)
    quant = json.loads((folder / "config.json").read_text())["quantization_config"]
    _, bits, _, I = packers.CASES[case]
    route, marlin = CONTRACTS[case]
    checkpoint = _checkpoint(folder, CT_PARAMS if case.startswith("ct_") else GPTQ_PARAMS, packers.EXPERTS)
    logging.disable(logging.WARNING)
    compared = 0
    try:
        for tp in TP:
            for r in range(tp):
                where = f"{case} tp={tp} rank={r}"
                _, loaded, stop = _vllm_rank(case, quant, I, tp, r, checkpoint)
                if route is not None:
                    plan, ours = _layoutc_route(route, folder, tp, r)
                    I_pp, P = plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded
                    assert I_pp == I // tp, (where, I_pp)  # vLLM's even split
                    fill = 8 if bits == 4 else 128
                    for key, want in _vllm_route(case, bits, I_pp, P, packers.HIDDEN, loaded, fill).items():
                        _equal(f"{where} {route} {key}", ours[key], want)
                        compared += 1
                    if ("zero", "w13") in ours:  # int4pack's zero (8 - z) * s: 0 for the implicit z = 8
                        assert not ours[("zero", "w13")].any() and not ours[("zero", "w2")].any(), where
                loc = stop.caller
                want = {
                    "w13_qweight": stop.args[0],
                    "w2_qweight": loc["marlin_w2_qweight"],
                    "w13_scales": loc["marlin_w13_scales"],
                    "w2_scales": loc["marlin_w2_scales"],
                }
                if loc.get("w13_qzeros") is not None:
                    want |= {"w13_qzeros": loc["w13_qzeros"], "w2_qzeros": loc["w2_qzeros"]}
                ours_m = _layoutc_marlin(marlin, folder, tp, r)
                assert set(want) <= set(ours_m), (where, sorted(ours_m))
                for name, t in want.items():
                    _equal(f"{where} {marlin} {name}", ours_m[name], t)
                    compared += 1
    finally:
        logging.disable(logging.NOTSET)
    print(f"{case}: {compared} per-rank tensors bit-equal to vLLM 0.32's loading")
    assert compared >= sum(TP) * 4


def test_vllm_cpu_backends_for_the_packers_formats() -> None:
    """Which experts vLLM 0.32's CPU path picks for compressed-tensors WNA16 on this host (no AMX):
    int4 grouped -> ZentorchExpertsInt4 (zentorch's DA8W4: int8 activations, not the W4A16 this
    format states); int4 channelwise and int8 (grouped or channelwise) -> no backend
    (NotImplementedError). No contract models ZentorchExpertsInt4; `layoutc run` takes the same
    codes on torch's int4pack / int8pack, and the Marlin contracts' loaders where neither takes them
    (docs/verification.md, "The outside packers' checkpoints")."""
    from compressed_tensors.quantization import QuantizationArgs
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_wna16 as ct,
    )

    picked = {}
    logging.disable(logging.WARNING)
    try:
        with set_current_vllm_config(VllmConfig()):
            for bits, group in ((4, 128), (4, 32), (4, -1), (8, 128), (8, -1)):
                config = oracle.moe_config(
                    num_experts=4,
                    hidden_size=256,
                    intermediate_size=256,
                    tp_size=1,
                    activation_name="silu",
                    dtype=torch.bfloat16,
                )
                args = QuantizationArgs(
                    num_bits=bits,
                    type="int",
                    symmetric=True,
                    strategy="channel" if group == -1 else "group",
                    group_size=None if group == -1 else group,
                )
                ok, method = oracle.call_or_reject(ct.CompressedTensorsWNA16MoEMethod, args, None, config)
                picked[(bits, group)] = method.experts_cls.__name__ if ok else None
    finally:
        logging.disable(logging.NOTSET)
    if not torch.cpu._is_amx_tile_supported():
        assert picked == {
            (4, 128): "ZentorchExpertsInt4",
            (4, 32): "ZentorchExpertsInt4",
            (4, -1): None,
            (8, 128): None,
            (8, -1): None,
        }, picked
