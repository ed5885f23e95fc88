"""Trusted views held to the engine's own code (issue 39 item 4).

A contract that binds no glue (`glue KIND { ... }`) declares a `view` that no kernel run
here checks: its kernel is a GPU one (FlashInfer, AITER, Marlin) or a CPU one this host
cannot run (vLLM's AMX MXFP4). Its w13 view and the w13 layout agree by proof, so an edit
that changes both (the red team's `halves` gpt-oss MXFP4, `[gate | up]` NVFP4) still
proves. Here each such view is held to the engine function that fixes the row order:

- the checkpoint's gate and up rows carry distinguishable tags (`encode_rows`);
- the engine's own function prepares them (vLLM 0.32's loader and its
  `convert_*_kernel_format` / `prepare_*` functions, run on CPU tensors, stopped where the
  kernel's own tile shuffle begins: that shuffle is a permutation the kernel inverts, and
  the contracts state the order handed to it);
- `declared_rows` reads the contract (its kernel `view` on `w13.n`, and the w13 tensors'
  `n` layouts) and says which (role, index) each physical row holds; every row of every
  w13 tensor the engine returns must hold exactly that (pads: no tag).

`HOLDERS` is the table: one entry per engine function, naming the contracts (and the
configurations) whose view it fixes. `READERS` are engines' own CPU references of a kernel
(FlashInfer's trace reference of trtllm_fp4_block_scale_moe, run in a child process by
test_trusted_views.py): a random gate and up placed by the declared view must come out as
silu(gate) * up (`reference_case`). `UNHELD` names the glue-less contracts no engine
function here holds, with the reason (docs/verification.md, "Trusted views").
"""

# ruff: noqa: E741  (H and I are the field's names for hidden_size and intermediate_size)

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parents[3]
VLLM = "vLLM 0.32.0"

#: A row's content: (role, index in that role's rows), or None for a pad (no tag).
Row = tuple[str, int] | None
Config = Mapping[str, Any]


# ---- tagged rows --------------------------------------------------------------------

BASE = 100  # tag digits: bytes 0..99, so no FP8 byte is a NaN (0x7f / 0xff) on the way


def tag_of(role: str, index: int, rows: int) -> int:
    """The tag (>= 1) of checkpoint row `index` of `role` ("gate" | "up"), `rows` rows per role."""
    return 1 + index + (rows if role == "up" else 0)


def row_of(tag: int, rows: int) -> Row:
    """The inverse of tag_of (0: a pad row)."""
    if tag == 0:
        return None
    return ("gate", tag - 1) if tag <= rows else ("up", tag - 1 - rows)


def encode_rows(tags: list[int], experts: int, cols: int, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """[experts, len(tags), cols] bytes whose row r spells tags[r] in its first two columns
    (base 100, low digit first) and is 0 elsewhere; `dtype` a one-byte type (viewed)."""
    assert cols >= 2 and max(tags) < BASE * BASE
    t = torch.zeros(experts, len(tags), cols, dtype=torch.uint8)
    digits = torch.tensor(tags, dtype=torch.int64)
    t[:, :, 0] = (digits % BASE).to(torch.uint8)
    t[:, :, 1] = (digits // BASE).to(torch.uint8)
    return t.view(dtype)


def decode_rows(t: torch.Tensor, dim: int, rows: int) -> list[list[Row]]:
    """Per expert, the Row each position of `t`'s dimension `dim` holds. A row must be a
    whole tag (its first two bytes) and zeros, or all zeros (a pad)."""
    if t.dtype.itemsize != 1:  # a float bias: the tag is the value
        moved = t.movedim(dim, 1).reshape(t.shape[0], t.shape[dim], -1).to(torch.float64)
        tags = moved[:, :, 0]
        assert torch.equal(tags, tags.round()) and torch.all(moved == moved[:, :, :1]), "a bias row is not one tag"
        return [[row_of(int(v), rows) for v in e.tolist()] for e in tags]
    b = t.contiguous().view(torch.uint8).movedim(dim, 1)
    b = b.reshape(b.shape[0], b.shape[1], -1).to(torch.int64)
    assert int(b[:, :, 2:].abs().sum()) == 0, "a row holds bytes beyond its tag: the engine mixed rows"
    return [[row_of(int(v), rows) for v in (e[:, 0] + BASE * e[:, 1]).tolist()] for e in b]


# ---- what the contract declares -------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """What a contract states about w13's rows in one configuration.

    view: the Row the kernel's `view` on w13.n reads at each physical position;
    layouts: per w13 tensor (by name), the Row its `n` layout places at each position;
    logical / padded: rows per role that hold data (rank 0's slice; a block shard's tail is
    fill) and per role with padding."""

    contract: str
    view: tuple[Row, ...]
    layouts: Mapping[str, tuple[Row, ...]]
    logical: int
    padded: int


def declared_rows(path: str | Path, config: Config) -> Declared:
    """Read contract `path` (checked, not verified) and evaluate, under `config` (every
    parameter; defaults filled), its kernel's view of w13.n and each w13 tensor's n layout.
    Raises AssertionError when the contract does not load, refuses `config` (a require or
    admit is false) or states no single view of w13.n."""
    from layoutc.compiler.cases import specialise_for
    from layoutc.compiler.evaluate import eval_expr, eval_lets
    from layoutc.compiler.source import load
    from layoutc.runtime import algebra

    contract, diags, _ = load(str(path))
    assert contract is not None, [str(d) for d in diags]
    env: dict[str, Any] = {p.name: p.default for p in contract.params if p.default is not None}
    env.update({k: v for k, v in config.items() if any(p.name == k for p in contract.params)})
    case = specialise_for(contract, env)
    env = eval_lets(case, env)
    refused = [r.message for r in case.rules if eval_expr(r.cond, env) is not True]
    assert not refused, f"{contract.name} refuses {dict(config)}: {refused}"
    assert case.kernel is not None
    w13 = case.weight("w13")
    views = [v for v in case.kernel.views if v.tensor == w13.name and v.axis == "n"]
    assert len(views) == 1, f"{contract.name}: no single kernel view of {w13.name}.n"
    view = views[0]
    n = w13.axis("n")
    logical, padded = int(eval_expr(n.logical, env)), int(eval_expr(n.padded, env))
    if case.shard is not None and case.shard.blocks is not None:  # rank 0 of a block shard: its slice, then tail
        logical = min(logical, int(eval_expr(case.shard.full, env)))
    size = n.segments * padded
    read: list[Row] = []
    for j in range(size):
        seg, entry = algebra.read(view.view, j, size, algebra.INTS)
        read.append((view.roles[seg], entry) if entry < logical and len(view.roles) > seg else None)
    layouts: dict[str, tuple[Row, ...]] = {}
    for t in case.tensors:
        if t.projection != "w13" or not any(a.name == "n" for a in t.axes):
            continue
        ax = t.axis("n")
        if ax.kind == "groups":  # a block-scale axis counts groups of rows, not rows
            continue
        lg, pd = min(int(eval_expr(ax.logical, env)), logical), int(eval_expr(ax.padded, env))
        rows: list[Row] = [None] * (ax.segments * pd)
        for k, role in enumerate(ax.roles or ("gate",)):
            for i in range(lg):
                rows[algebra.position(ax.layout, ax.segments, k, i, lg, pd)] = (role, i)
        layouts[t.name] = tuple(rows)
    return Declared(contract.name, tuple(read), layouts, logical, padded)


# ---- the engine side -----------------------------------------------------------------


@dataclass(frozen=True)
class EngineRows:
    """What an engine function hands the kernel: per w13 tensor role ("weight" | "scale" |
    "bias"), per expert, the Row at each position of its n dimension."""

    tensors: Mapping[str, list[list[Row]]]


@dataclass(frozen=True)
class Holder:
    """One engine function that fixes the w13 row order, and the contract views it holds.

    name: the test id; function / source: what runs (file and function, vLLM release);
    contracts: contract name -> configurations (tp 1; each needs its engine allocation);
    run: config -> EngineRows. `refused`: (contract, reason) pairs where the engine hands rows in an
    order the contract's view cannot state, so the contract refuses these configurations (the
    test holds the refusal, and that the engine still contradicts the view)."""

    name: str
    function: str
    source: str
    contracts: Mapping[str, tuple[Config, ...]]
    run: Callable[[Config], EngineRows]
    refused: tuple[tuple[str, str], ...] = ()


E = 2  # experts


def _checkpoint_halves(I: int, P: int, cols: int, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """vLLM's own loader (RoutedExperts._load_w13: shard w1 -> first half, w3 -> second, each
    in the prefix of its P rows) run on tagged checkpoint w1 (gate) and w3 (up) rows, tp 1."""
    from tests.support.conformance import oracle

    config = oracle.moe_config(num_experts=E, hidden_size=64, intermediate_size=I, tp_size=1)
    gate = encode_rows([tag_of("gate", i, I) for i in range(I)], E, cols).view(dtype)
    up = encode_rows([tag_of("up", i, I) for i in range(I)], E, cols).view(dtype)
    param = torch.zeros(E, 2 * P, cols, dtype=torch.uint8).view(dtype)
    return oracle.load_w13(config, param, gate, up, rank=0)


def _bias_halves(I: int, P: int) -> torch.Tensor:
    b = torch.zeros(E, 2 * P)
    b[:, :I] = torch.tensor([tag_of("gate", i, I) for i in range(I)], dtype=torch.float32)
    b[:, P:P + I] = torch.tensor([tag_of("up", i, I) for i in range(I)], dtype=torch.float32)
    return b


def _gpt_oss_rows(I: int, P: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The w13 rows (tagged bytes) and bias (tags) vLLM's gpt-oss loader
    (GptOssModel._load_weights_mxfp4, run by oracle.gpt_oss_mxfp4_rank_rows) puts in a
    [E, 2 * P] parameter at tp 1: checkpoint rows in their order, then zeros. A gpt-oss
    checkpoint row 2i is gate i and 2i + 1 is up i (transformers' GptOssExperts:
    `gate_up[..., ::2]`, `gate_up[..., 1::2]`)."""
    from tests.support.conformance import oracle

    rows = oracle.gpt_oss_mxfp4_rank_rows(I, 1, 0)["w13_rows"]
    tags = [tag_of("gate" if r % 2 == 0 else "up", r // 2, I) for r in rows] + [0] * (2 * P - len(rows))
    return encode_rows(tags, E, cols), torch.tensor(tags, dtype=torch.float32).expand(E, -1).contiguous()


def _rows(t: torch.Tensor, rows: int, dim: int = 1) -> list[list[Row]]:
    return decode_rows(t, dim, rows)


@contextmanager
def _stub_modules(**modules: Mapping[str, Any]) -> Iterator[None]:
    """sys.modules entries for the CUDA/ROCm packages a vLLM function imports inside itself,
    each a module with the given attributes (parents created empty)."""
    entries: dict[str, types.ModuleType] = {}
    for dotted, attrs in modules.items():
        parts = dotted.split(".")
        for i in range(1, len(parts)):
            entries.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        mod = types.ModuleType(dotted)
        for k, v in attrs.items():
            setattr(mod, k, v)
        entries[dotted] = mod
    with mock.patch.dict(sys.modules, entries):
        yield


def _identity_rows(_cache: Any, t: torch.Tensor, *_a: Any, **_k: Any) -> torch.Tensor:
    """Stands in for FlashInfer's epilogue-tile permutation (get_w2_permute_indices_with_cache):
    the identity over the rows, so what comes out is the order vLLM handed the shuffle."""
    return torch.arange(t.shape[0])


_FLASHINFER_SHUFFLES: dict[str, Mapping[str, Any]] = {
    "flashinfer.fp4_quantization": {"nvfp4_block_scale_interleave": lambda t: t},
    "flashinfer.fused_moe.core": {"get_w2_permute_indices_with_cache": _identity_rows},
}


# -- FlashInfer TRT-LLM NVFP4 ------------------------------------------------------------


def _nvfp4_trtllm(cfg: Config) -> EngineRows:
    """prepare_nvfp4_moe_layer_for_fi_or_cutlass(FLASHINFER_TRTLLM) on the loader's rows, stopped
    at prepare_static_weights_for_trtllm_fp4_moe (FlashInfer's shuffle): its w13 and scale."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import NvFp4MoeBackend
    from vllm.model_executor.layers.quantization.utils import flashinfer_fp4_moe as fi4

    I, H = cfg["intermediate_size"], cfg["hidden_size"]
    w13 = _checkpoint_halves(I, I, H // 2)
    s13 = _checkpoint_halves(I, I, H // 16).view(torch.float8_e4m3fn)
    w2 = torch.zeros(E, H, I // 2, dtype=torch.uint8)
    s2 = torch.zeros(E, H, I // 16, dtype=torch.uint8).view(torch.float8_e4m3fn)
    moe = types.SimpleNamespace(hidden_dim=H, hidden_dim_unpadded=None, intermediate_size_per_partition=I,
                                moe_parallel_config=types.SimpleNamespace(enable_eplb=False))
    layer: Any = types.SimpleNamespace(activation=MoEActivation(cfg["activation"]), moe_config=moe)
    seen: dict[str, torch.Tensor] = {}

    def stop(w13: torch.Tensor, w2: torch.Tensor, s13: torch.Tensor, s2: torch.Tensor, **kw: Any) -> Any:
        seen.update(weight=w13.clone(), scale=s13.clone())
        return w13, s13, w2, s2

    ones = torch.ones(E, dtype=torch.float32)
    with mock.patch.object(fi4, "prepare_static_weights_for_trtllm_fp4_moe", stop):
        fi4.prepare_nvfp4_moe_layer_for_fi_or_cutlass(NvFp4MoeBackend.FLASHINFER_TRTLLM, layer, w13, s13, ones, ones,
                                                      w2, s2, ones, ones, is_act_and_mul=True)
    return EngineRows({k: _rows(v, I) for k, v in seen.items()})


# -- MXFP4: vLLM's kernel-format conversions (oracle/mxfp4.py) ----------------------------


def _mxfp4_sizes(backend: Any, cfg: Config) -> tuple[int, int]:
    """vLLM's own allocation: mxfp4_round_up_hidden_size_and_intermediate_size (H_p, P)."""
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4

    from tests.support.conformance import oracle

    act = None if cfg.get("activation_passed", 1) == 0 else oracle.activation(cfg["activation"])
    with oracle.rocm_platform() if "AITER" in backend.name else _nothing():
        return mxfp4.mxfp4_round_up_hidden_size_and_intermediate_size(backend, cfg["hidden_size"],
                                                                      cfg["intermediate_size"], act)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _mxfp4_inputs(cfg: Config, backend: Any, gpt_oss: bool) -> tuple[int, dict[str, torch.Tensor]]:
    H_p, P = _mxfp4_sizes(backend, cfg)
    I = cfg["intermediate_size"]
    if gpt_oss:
        w13, b13 = _gpt_oss_rows(I, P, H_p // 2)
        s13, _ = _gpt_oss_rows(I, P, H_p // 32)
    else:
        w13, s13, b13 = _checkpoint_halves(I, P, H_p // 2), _checkpoint_halves(I, P, H_p // 32), _bias_halves(I, P)
    return P, {"w13_weight": w13, "w2_weight": torch.zeros(E, H_p, P // 2, dtype=torch.uint8),
               "w13_weight_scale": s13, "w2_weight_scale": torch.zeros(E, H_p, P // 32, dtype=torch.uint8),
               "w13_bias": b13, "w2_bias": torch.zeros(E, H_p)}


def _mxfp4_convert(backend_name: str, gpt_oss: bool) -> Callable[[Config], EngineRows]:
    """convert_gpt_oss_weight_to_mxfp4_moe_kernel_format (gpt_oss) or
    convert_weight_to_mxfp4_moe_kernel_format on `backend_name`, the kernel's own tile
    shuffles (FlashInfer's permutation, AITER's shuffle_weight*, the CPU VNNI prepack)
    replaced by the identity: the w13 weight, scale and bias rows it hands them."""

    def run(cfg: Config) -> EngineRows:
        from vllm._aiter_ops import rocm_aiter_ops
        from vllm.model_executor.layers.fused_moe.experts import cpu_moe
        from vllm.model_executor.layers.fused_moe.oracle import mxfp4

        from tests.support.conformance import oracle

        backend = mxfp4.Mxfp4MoeBackend[backend_name]
        I = cfg["intermediate_size"]
        P, t = _mxfp4_inputs(cfg, backend, gpt_oss)
        params = {k: torch.nn.Parameter(v, requires_grad=False) for k, v in t.items()}

        def same(x: Any, *a: Any, **k: Any) -> Any:
            return x

        stubs: dict[str, Mapping[str, Any]] = {**_FLASHINFER_SHUFFLES, "aiter.ops.shuffle": {"shuffle_weight": same, "shuffle_scale": same},
                 "aiter.utility.fp4_utils": {"e8m0_shuffle": same}}
        platform = oracle.rocm_platform() if "AITER" in backend_name else _nothing()
        with _stub_modules(**stubs), platform, mock.patch.dict(os.environ), \
                mock.patch.object(rocm_aiter_ops, "shuffle_weight_a16w4", same, create=True), \
                mock.patch.object(rocm_aiter_ops, "shuffle_scale_a16w4", same, create=True), \
                mock.patch.object(rocm_aiter_ops, "shuffle_weights", lambda a, b, *x, **k: (a, b), create=True), \
                mock.patch.object(cpu_moe, "prepare_mxfp4_moe_layer_for_cpu", lambda *a: a):
            if gpt_oss:
                out = mxfp4.convert_gpt_oss_weight_to_mxfp4_moe_kernel_format(
                    backend, cast(Any, None), params["w13_weight"], params["w2_weight"], params["w13_weight_scale"],
                    params["w2_weight_scale"], params["w13_bias"], params["w2_bias"], _cache_permute_indices={})
            else:
                out = mxfp4.convert_weight_to_mxfp4_moe_kernel_format(
                    backend, cast(Any, None), params["w13_weight"], params["w2_weight"], params["w13_weight_scale"],
                    params["w2_weight_scale"], params["w13_bias"], params["w2_bias"], _cache_permute_indices={},
                    activation=oracle.activation(cfg["activation"]))
        w13, _, s13, _, b13, _ = out
        scale = s13.reshape(E, 2 * P, -1)
        got = {"weight": _rows(w13.data.view(torch.uint8), I), "scale": _rows(scale.view(torch.uint8), I)}
        if b13 is not None:
            got["bias"] = _rows(b13.reshape(E, 2 * P), I)
        return EngineRows(got)

    return run


# -- the loader itself, and the unquantized AITER conversion ----------------------------


def _loader(cfg: Config) -> EngineRows:
    """RoutedExperts._load_w13 (w1 -> first half, w3 -> second half) into a parameter of
    2 * P rows, P the contract's padded rows (`padded` in cfg): the order every kernel path
    below reads until its first GPU op (tests/conformance/test_vllm_quant_loading.py,
    test_marlin.py hold those stops bit for bit)."""
    I = cfg["intermediate_size"]
    return EngineRows({"weight": _rows(_checkpoint_halves(I, cfg["padded"], 4), I)})


def _w8a8_zen(cfg: Config) -> EngineRows:
    """CompressedTensorsW8A8Int8MoEMethod.process_weights_after_loading with ZenCPUExpertsInt8 (the class
    its __init__ picks here): tagged int8 w1 / w3 rows and float scales (tag = value), loaded by vLLM's
    own RoutedExperts.weight_loader, then the method (for swigluoai it reorders weights and scales to
    interleaved pairs) and the experts it builds; the layer's w13 weight and scale are what
    zentorch_fused_moe reads (nothing padded, nothing repacked)."""
    from compressed_tensors.quantization import QuantizationArgs
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_w8a8_int8 as ct,
    )

    from tests.support.conformance import oracle

    I, H = cfg["intermediate_size"], cfg["hidden_size"]
    with set_current_vllm_config(VllmConfig()):
        config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=1,
                                   activation_name=cfg["activation"])
        method = ct.CompressedTensorsW8A8Int8MoEMethod(
            QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel"),
            QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True), config)
        assert method.experts_cls is cpu_moe.ZenCPUExpertsInt8, method.experts_cls  # zentorch_fused_moe here
        layer = oracle.routed_experts_stub(config, None, method)
        method.create_weights(layer, E, H, I, torch.bfloat16, weight_loader=layer.weight_loader)
        weights = {r: encode_rows([tag_of(r, i, I) for i in range(I)], E, H, torch.int8) for r in ("gate", "up")}
        scales = {r: torch.tensor([[float(tag_of(r, i, I))] for i in range(I)]).expand(E, I, 1) for r in ("gate", "up")}
        oracle.load_experts(layer, {
            "w13_weight": {"w1": list(weights["gate"]), "w3": list(weights["up"])},
            "w13_weight_scale": {"w1": list(scales["gate"]), "w3": list(scales["up"])}})
        layer.layer_name, layer.activation = "model.layers.0.mlp.experts", config.activation
        layer._expert_routing_tables = lambda: None
        method.process_weights_after_loading(layer)
    return EngineRows({"weight": _rows(layer.w13_weight.data, I), "scale": _rows(layer.w13_weight_scale.data, I)})


def _aiter_unquantized(cfg: Config) -> EngineRows:
    """convert_to_unquantized_kernel_format(AITER): _zero_intermediate_padding, then
    rocm_aiter_ops.shuffle_weights (the CK shuffle, replaced by the identity) on the loaded rows."""
    from vllm._aiter_ops import rocm_aiter_ops
    from vllm.model_executor.layers.fused_moe.oracle import unquantized

    from tests.support.conformance import oracle

    I = cfg["intermediate_size"]
    H = cfg["hidden_size"]
    (_, P) = unquantized.unquantized_round_up_hidden_size_and_intermediate_size(
        unquantized.UnquantizedMoeBackend.AITER, H, I)
    config = oracle.moe_config(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=1)
    config.intermediate_size_per_partition = P
    w13 = _checkpoint_halves(I, P, 4)
    w13[:, I:P] = 7  # what the engine must zero (torch.empty's garbage)
    w13[:, P + I:] = 7
    w2 = torch.zeros(E, H, P, dtype=torch.uint8)
    with mock.patch.object(rocm_aiter_ops, "shuffle_weights", lambda a, b, *x, **k: (a, b), create=True):
        out, _ = unquantized.convert_to_unquantized_kernel_format(unquantized.UnquantizedMoeBackend.AITER, config,
                                                                   w13, w2)
    return EngineRows({"weight": _rows(out, I)})


# -- SGLang 0.5.23's loaders (a child process: tests/support/conformance/sglang_oracle.py role_rows) --------

SGLANG = "SGLang 0.5.23"


def _sglang_run(cfg: Config) -> EngineRows:
    """SGLang's own loaders (FusedMoE._load_w13; gpt-oss: GptOssForCausalLM._load_mxfp4_experts_weights)
    on tagged checkpoint rows, at SGLang's own padded size, rank 0 of tp 1; the CPU kernel's AMX
    prepack (sgl_kernel convert_weight_packed) takes the loaded rows as they are."""
    I = cfg["intermediate_size"]
    answer = _sglang_answers()[(cfg["scheme"], I)]
    assert "error" not in answer, answer
    return EngineRows({role: [[row_of(t, I) for t in answer[role]]] for role in ("weight", "scale", "bias")
                       if role in answer})


@functools.cache
def _sglang_answers() -> dict[tuple[str, int], dict[str, Any]]:
    """Every SGLang holder configuration answered by one child process (one sglang import).
    Skips without LAYOUTC_SGLANG_PATH, fails instead under CI (as tests/conformance/test_sglang.py)."""
    import pytest

    path = os.environ.get("LAYOUTC_SGLANG_PATH", "")
    if not (path and (Path(path) / "sglang").is_dir()):
        message = (f"SGLang's loaders need LAYOUTC_SGLANG_PATH (README, Environment); LAYOUTC_SGLANG_PATH={path!r}")
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(f"CI must run the SGLang trusted views, not skip them: {message}")
        pytest.skip(message)
    keys = sorted({(c["scheme"], c["intermediate_size"]) for h in HOLDERS if h.run is _sglang_run
                   for cs in h.contracts.values() for c in cs})
    cases = [{"kind": "role_rows", "intermediate_size": i, "scheme": sch} for sch, i in keys]
    with tempfile.TemporaryDirectory() as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps(cases), encoding="utf-8")
        env = {**os.environ, "LAYOUTC_SGLANG_PATH": str(Path(path).resolve()), "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "tests.support.conformance.sglang_oracle", str(request)], env=env,
                              capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    reply = json.loads(done.stdout)
    assert reply["sglang_version"] == "0.5.23"
    return dict(zip(keys, reply["answers"], strict=True))


# ---- the table ------------------------------------------------------------------------


def _cfgs(base: Mapping[str, Any], sizes: tuple[int, ...], acts: tuple[str, ...], **extra: Any) -> tuple[Config, ...]:
    return tuple({**base, "intermediate_size": i, "activation": a, **extra} for a in acts for i in sizes)


_ONE = {"num_experts": E, "tp_size": 1}
_NV = {**_ONE, "hidden_size": 256, "dtype": "bfloat16"}
_MX = {**_ONE, "hidden_size": 256}
_AITER_W4A4_GPT_OSS = ("vLLM hands AITER W4A4 gpt-oss's interleaved (gate, up) rows (no de-interleave in the "
                       "AITER_MXFP4_MXFP4 branch); the contract's view is [gate | up] halves, so it refuses swigluoai")

HOLDERS: tuple[Holder, ...] = (
    Holder("nvfp4_trtllm", "prepare_nvfp4_moe_layer_for_fi_or_cutlass (reorder_w1w3_to_w3w1, align_fp4_moe_*_for_fi)",
           f"{VLLM}: vllm/model_executor/layers/quantization/utils/flashinfer_fp4_moe.py",
           # I_pp 64: unpadded; 48 and 80: padded per half to 64 / 128
           {"flashinfer_nvfp4_moe": _cfgs(_NV, (64, 48, 80), ("silu", "gelu", "gelu_tanh"))}, _nvfp4_trtllm),
    Holder("mxfp4_trtllm_gpt_oss", "convert_gpt_oss_weight_to_mxfp4_moe_kernel_format (FLASHINFER_TRTLLM_MXFP4_BF16: "
           "swap_every_two_rows)", f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
           {"flashinfer_trtllm_mxfp4_moe": _cfgs(_MX, (128, 96), ("swigluoai",))},
           _mxfp4_convert("FLASHINFER_TRTLLM_MXFP4_BF16", gpt_oss=True)),
    Holder("mxfp4_trtllm", "convert_weight_to_mxfp4_moe_kernel_format (FLASHINFER_TRTLLM_MXFP4_BF16: stack([w3, w1]))",
           f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
           {"flashinfer_trtllm_mxfp4_moe": _cfgs(_MX, (128, 64), ("silu",))},
           _mxfp4_convert("FLASHINFER_TRTLLM_MXFP4_BF16", gpt_oss=False)),
    Holder("mxfp4_aiter_bf16_gpt_oss", "convert_gpt_oss_weight_to_mxfp4_moe_kernel_format (AITER_MXFP4_BF16: "
           "de-interleave, then shuffle_weight_a16w4)", f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
           {"aiter_fused_moe": _cfgs(_MX, (256, 96), ("swigluoai",))},
           _mxfp4_convert("AITER_MXFP4_BF16", gpt_oss=True)),
    Holder("mxfp4_aiter_bf16", "convert_weight_to_mxfp4_moe_kernel_format (AITER_MXFP4_BF16, gate_up=True shuffle)",
           f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
           {"aiter_fused_moe": (*_cfgs(_MX, (128, 96), ("silu",)), *_cfgs(_MX, (256, 160), ("gelu",)),
                                *_cfgs(_MX, (256, 96), ("silu",), activation_passed=0))},
           _mxfp4_convert("AITER_MXFP4_BF16", gpt_oss=False)),
    Holder("mxfp4_aiter_w4a4", "convert_weight_to_mxfp4_moe_kernel_format (AITER_MXFP4_MXFP4 -> the gpt-oss "
           "conversion, shuffle_weights on the loaded rows)", f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
           {"aiter_mxfp4_w4a4_moe": _cfgs(_MX, (256, 160), ("silu", "gelu"))},
           _mxfp4_convert("AITER_MXFP4_MXFP4", gpt_oss=False)),
    Holder("mxfp4_aiter_w4a4_gpt_oss", "convert_gpt_oss_weight_to_mxfp4_moe_kernel_format (AITER_MXFP4_MXFP4)",
           f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
           {"aiter_mxfp4_w4a4_moe": _cfgs(_MX, (256,), ("swigluoai",))},
           _mxfp4_convert("AITER_MXFP4_MXFP4", gpt_oss=True),
           refused=(("aiter_mxfp4_w4a4_moe", _AITER_W4A4_GPT_OSS),)),
    Holder("mxfp4_cpu_gpt_oss", "convert_gpt_oss_weight_to_mxfp4_moe_kernel_format (CPU: rows as loaded, then "
           "prepare_mxfp4_moe_layer_for_cpu)", f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
           {"vllm_cpu_mxfp4_gpt_oss_moe": _cfgs({**_ONE, "hidden_size": 64}, (64, 96), ("swigluoai",))},
           _mxfp4_convert("CPU", gpt_oss=True)),
    Holder("mxfp4_cpu", "convert_weight_to_mxfp4_moe_kernel_format (CPU: prepare_mxfp4_moe_layer_for_cpu)",
           f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",
           {"vllm_cpu_mxfp4_moe": _cfgs({**_ONE, "hidden_size": 64}, (64, 96), ("silu",))},
           _mxfp4_convert("CPU", gpt_oss=False)),
    Holder("aiter_unquantized", "convert_to_unquantized_kernel_format (AITER: _zero_intermediate_padding, "
           "shuffle_weights)", f"{VLLM}: vllm/model_executor/layers/fused_moe/oracle/unquantized.py",
           {"aiter_unquantized_moe": _cfgs({**_ONE, "hidden_size": 64, "dtype": "bfloat16"}, (128, 88, 256, 200),
                                           ("silu", "swigluoai"))}, _aiter_unquantized),
    Holder("loader", "RoutedExperts._load_w13 (shard w1 -> first half, w3 -> second half)",
           f"{VLLM}: vllm/model_executor/layers/fused_moe/routed_experts.py",
           {"marlin_moe_wna16": _cfgs({**_ONE, "hidden_size": 256, "group_size": 32, "act_order": False,
                                       "dtype": "bfloat16"}, (256, 96), ("silu",)),
            "marlin_moe_awq": _cfgs({**_ONE, "hidden_size": 256, "group_size": 32, "dtype": "bfloat16"},
                                    (256, 96), ("silu",)),
            "marlin_moe_gptq_int8": _cfgs({**_ONE, "hidden_size": 256, "group_size": 32, "dtype": "bfloat16"},
                                          (256, 96), ("silu",)),
            "marlin_moe_fp8": _cfgs({**_ONE, "hidden_size": 256, "scheme": "mxfp8", "scale_dtype": "uint8"},
                                    (256, 160), ("silu",)),
            "vllm_cpu_int8_moe": _cfgs({**_ONE, "hidden_size": 64, "isa": "amx", "dtype": "bfloat16"}, (64, 96),
                                       ("silu",)),
            "vllm_cpu_int8_padded_moe": _cfgs({**_ONE, "hidden_size": 64, "dtype": "bfloat16"}, (64, 80), ("silu",)),
            "vllm_cpu_w4a8_int4_moe": _cfgs({**_ONE, "hidden_size": 64, "group_size": 32, "scale_dtype": "bfloat16"},
                                            (64, 96), ("silu",))}, _loader),
    Holder("w8a8_zen", "CompressedTensorsW8A8Int8MoEMethod.process_weights_after_loading (ZenCPUExpertsInt8: "
           "swigluoai reordered to interleaved pairs, weights and scales)",
           f"{VLLM}: vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/"
           "compressed_tensors_moe_w8a8_int8.py",
           {"vllm_zen_cpu_int8_moe": _cfgs({**_ONE, "hidden_size": 64, "dtype": "bfloat16"}, (64, 45),
                                           ("silu", "gelu")),
            "vllm_zen_cpu_int8_swigluoai_moe": _cfgs({**_ONE, "hidden_size": 64, "dtype": "bfloat16",
                                                     "swiglu_alpha_milli": 1702, "swiglu_limit_milli": 7000},
                                                    (64, 45), ("swigluoai",))}, _w8a8_zen),
    Holder("sglang_loader", "FusedMoE._load_w13 (w1 then w3); gpt-oss: GptOssForCausalLM._load_mxfp4_experts_weights",
           f"{SGLANG}: sglang/srt/layers/moe/fused_moe_triton/layer.py, sglang/srt/models/gpt_oss.py",
           {"sglang_cpu_moe": _cfgs({**_ONE, "hidden_size": 64, "dtype": "bfloat16", "scheme": "bf16"}, (64, 80),
                                    ("silu", "gelu")),
            "sglang_cpu_fp8_moe": _cfgs({**_ONE, "hidden_size": 128, "block": 128, "dtype": "bfloat16",
                                         "scheme": "fp8"}, (128, 256), ("silu",)),
            "sglang_cpu_mxfp4_moe": _cfgs({**_ONE, "hidden_size": 64, "swiglu_alpha_milli": 1702,
                                           "swiglu_limit_milli": 7000, "scheme": "mxfp4"}, (128, 96), ("swigluoai",))},
           _sglang_run),
)

#: Glue-less contracts whose kernel runs on this host through layoutc's own torch glue (the
#: order is layoutc's own, read from the module by the runner): not trusted views.
RUN_HERE: dict[str, str] = {
    "torch_int4pack_gptq_moe": "layoutc run's quantized path (tools/quant_run/rank.py) on torch's _weight_int4pack_mm",
    "torch_int8pack_gptq_moe": "layoutc run's quantized path (tools/quant_run/rank8.py) on torch's _weight_int8pack_mm",
}

#: Trusted views no engine function here holds, with the reason.
UNHELD: dict[str, str] = {
    "flashinfer_fp8_moe": "its engine function (flashinfer_utils.align_moe_weights_for_fi) is run by the replay "
    "(bench/replay_bugs.py) on the releases its models line names, not by this lane",
    "flashinfer_trtllm_mxfp8_moe": "its engine function (flashinfer_utils.prepare_fp8_moe_layer_for_fi's MXFP8 "
                                   "TRT-LLM alignment) exists from vLLM 0.33.0; tests/conformance/test_release_rules.py "
                                   "holds its [up | gate] rows, byte for byte, to 0.33's and 0.34's own function",
    "marlin_moe_ct_fp8": "held outside this lane's holder table: tests/conformance/test_vllm_ct_fp8_admission.py runs "
                         "vLLM's own CompressedTensorsW8A8Fp8MoEMethod (create_weights, weight_loader) and holds each "
                         "rank's tensors bit for bit and its admission, at tp 1/2/4/8",
    "marlin_moe_ct_mxfp4": "held outside this lane's holder table: tests/conformance/test_vllm_ct_mxfp4_loading.py runs "
                           "vLLM's own CompressedTensorsW4A4Mxfp4MoEMethod and loader up to its first GPU op and holds "
                           "each rank's tensors bit for bit, at tp 1/2/4/8",
    "vllm_ct_wna16_int4_moe": "an admission contract: tests/conformance/test_vllm_ct_wna16_admission.py holds its "
                              "admission and each rank's tensor shapes to vLLM's own CompressedTensorsWNA16MoEMethod."
                              "create_weights; the bytes layoutc runs are the int4pack/int8pack contracts'",
    "vllm_ct_wna16_int8_moe": "an admission contract: tests/conformance/test_vllm_ct_wna16_admission.py holds its "
                              "admission and each rank's tensor shapes to vLLM's own CompressedTensorsWNA16MoEMethod."
                              "create_weights; the bytes layoutc runs are the int4pack/int8pack contracts'",
}


def held_contracts() -> dict[str, list[Holder]]:
    """contract -> the holders that fix its view."""
    out: dict[str, list[Holder]] = {}
    for h in HOLDERS:
        for c in h.contracts:
            out.setdefault(c, []).append(h)
    return out


def compare(declared: Declared, engine: EngineRows) -> list[str]:
    """Every position where the engine's rows differ from the contract's view (and from each
    w13 tensor's layout); [] when they agree everywhere. Messages name role and index."""
    out: list[str] = []
    want = list(declared.view)
    for role, per_expert in engine.tensors.items():
        for e, got in enumerate(per_expert):
            if len(got) != len(want):
                out.append(f"{role}[{e}]: the engine hands {len(got)} rows, the contract's view reads {len(want)}")
                continue
            bad = [(j, w, g) for j, (w, g) in enumerate(zip(want, got, strict=True)) if w != g]
            out += [f"{role}[{e}] row {j}: the view reads {w or 'pad'}, the engine puts {g or 'pad'} there"
                    for j, w, g in bad[:3]]
    for name, rows in declared.layouts.items():
        if list(rows) != want:
            out.append(f"{name}.n's layout places rows unlike the view")
    return out


def check(path: str | Path, holder: Holder, config: Config) -> list[str]:
    """Hold contract `path`'s declared w13 view, in `config`, to `holder`'s engine function."""
    declared = declared_rows(path, config)
    cfg = {**config, "padded": declared.padded}
    return compare(declared, holder.run(cfg))


# ---- an engine's own reference of how its kernel reads w13 ----------------------------

FLASHINFER = "FlashInfer 0.7.4"


@dataclass(frozen=True)
class Reader:
    """An engine's own CPU reference of its kernel (it computes with the rows it is given).

    A contract's declared view places a random gate and up (FP4 codes) into physical rows
    (`reference_case`); the reference's output must be silu(x G^T) * (x U^T) W2^T computed
    here in float64. `gated_rows`: contract -> whether its rows are already in the kernel's
    gated order (vLLM hands them to the epilogue shuffle alone) rather than the [X1 | X2] that
    FlashInfer's own preparation reorders."""

    name: str
    function: str
    source: str
    contracts: Mapping[str, tuple[Config, ...]]
    gated_rows: Mapping[str, bool]


READERS: tuple[Reader, ...] = (
    Reader("flashinfer_reference", "flashinfer.trace.templates.moe._fp4_moe_run_experts (the trace reference of "
           "trtllm_fp4_block_scale_moe) and reorder_rows_for_gated_act_gemm's row indices",
           f"{FLASHINFER}: flashinfer/trace/templates/moe.py, flashinfer/fused_moe/core.py",
           {"flashinfer_nvfp4_moe": _cfgs(_NV, (64, 48), ("silu",)),
            "flashinfer_trtllm_mxfp4_moe": (*_cfgs(_MX, (128, 96), ("swigluoai",)), *_cfgs(_MX, (64,), ("silu",)))},
           types.MappingProxyType({"flashinfer_nvfp4_moe": False, "flashinfer_trtllm_mxfp4_moe": True})),
)

_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                     dtype=torch.float64)


def _pack(codes: torch.Tensor) -> torch.Tensor:
    """FP4 codes [..., K] -> bytes [..., K / 2], low nibble first (OCP MX v1.0 5.3.3)."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def reference_case(path: str | Path, config: Config, gated_rows: bool, seed: int = 0) -> tuple[dict[str, Any],
                                                                                                torch.Tensor]:
    """The kernel inputs that contract `path`'s declared view gives a random expert in `config`,
    and the output a model computes from them: (case for flashinfer_oracle, expected [T, H]
    float64). Block scales are 1.0 (e4m3fn 0x38 per 16 values for NVFP4, E8M0 127 per 32 for
    MXFP4); pad rows and columns hold code 0 (+0.0)."""
    declared = declared_rows(path, config)
    H, I, P = config["hidden_size"], declared.logical, declared.padded
    mxfp4 = "mxfp4" in declared.contract or config.get("activation") == "swigluoai"
    block, one = (32, 127) if mxfp4 else (16, 0x38)
    g = torch.Generator().manual_seed(seed)
    gate, up = (torch.randint(0, 16, (E, I, H), generator=g) for _ in range(2))
    down = torch.randint(0, 16, (E, H, I), generator=g)
    w1 = torch.zeros(E, 2 * P, H, dtype=torch.int64)
    for j, row in enumerate(declared.view):
        if row is not None:
            w1[:, j] = (gate if row[0] == "gate" else up)[:, row[1]]
    w2 = torch.zeros(E, H, P, dtype=torch.int64)
    w2[:, :, :I] = down
    scale = torch.full((E, 2 * P, H // block), one, dtype=torch.uint8)
    scale2 = torch.full((E, H, P // block), one, dtype=torch.uint8)
    if not mxfp4:
        scale, scale2 = scale.view(torch.float8_e4m3fn), scale2.view(torch.float8_e4m3fn)
    T = 4
    x = (torch.randint(-8, 9, (T, H), generator=g) / 8).to(torch.bfloat16)
    topk = torch.arange(T).remainder(E).view(T, 1)
    case = {"hidden_states": x, "gemm1_weights": _pack(w1), "gemm1_weights_scale": scale, "gemm2_weights": _pack(w2),
            "gemm2_weights_scale": scale2, "weights": torch.ones(T, 1), "topk_idx": topk, "gated_rows": gated_rows}
    xf = x.to(torch.float64)
    want = torch.zeros(T, H, dtype=torch.float64)
    for t in range(T):
        e = int(topk[t, 0])
        a = xf[t] @ _E2M1[gate[e]].T, xf[t] @ _E2M1[up[e]].T
        want[t] = (torch.nn.functional.silu(a[0]) * a[1]) @ _E2M1[down[e]].T
    return case, want


def reference_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Relative error of the reference's bf16 output against the float64 expectation."""
    return float((got.to(torch.float64) - want).norm() / want.norm().clamp_min(1e-30))


# ---- vLLM's own activation, where the kernel path applies it outside the GEMM ---------------

#: Contracts whose kernel path applies vLLM's `apply_moe_activation` to the [tokens, 2 N] output
#: of the first GEMM (fused_marlin_moe: `intermediate_cache1.view(-1, 2 * N)`, vLLM 0.32.0
#: vllm/model_executor/layers/fused_moe/experts/marlin_moe.py); the GEMM keeps w13's row order,
#: so that output's columns are w13's rows and the activation reads them with the w13 view.
ACTIVATION_READ: dict[str, tuple[Config, ...]] = {
    name: tuple({**c, "activation": a} for c in next(h for h in HOLDERS if h.name == "loader").contracts[name]
                for a in ("silu", "gelu", "gelu_tanh"))
    for name in ("marlin_moe_wna16", "marlin_moe_awq", "marlin_moe_gptq_int8", "marlin_moe_fp8")
}

_GATED = {"silu": torch.nn.functional.silu,
          "gelu": torch.nn.functional.gelu,
          "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def activation_check(path: str | Path, config: Config, tokens: int = 3) -> list[str]:
    """Place a random gate and up by contract `path`'s declared view into a [tokens, 2 P] first-GEMM
    output, run vLLM's own `apply_moe_activation` on it (the `_C` CPU op: a kernel), and compare with
    act(gate) * up (pads: 0). Returns the disagreements ([]: the view is what vLLM's activation reads)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation, apply_moe_activation

    declared = declared_rows(path, config)
    I, P = declared.logical, declared.padded
    g = torch.Generator().manual_seed(0)
    gate, up = torch.randn(tokens, I, generator=g), torch.randn(tokens, I, generator=g)
    h = torch.zeros(tokens, 2 * P)
    for j, row in enumerate(declared.view):
        if row is not None:
            h[:, j] = (gate if row[0] == "gate" else up)[:, row[1]]
    out = torch.full((tokens, P), float("nan"))
    apply_moe_activation(MoEActivation(config["activation"]), out, h)
    want = torch.zeros(tokens, P)
    want[:, :I] = _GATED[config["activation"]](gate) * up
    err = float((out - want).norm() / want.norm())
    return [] if err < 1e-4 else [f"vLLM's {config['activation']} reads another view: rel err {err:.2e}"]
