"""Real-kernel tests of the contracts bound to torch's own CPU ops and to zentorch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from tests.conftest import ROOT, require_package
from tests.support.reference import moe_reference

pytestmark = pytest.mark.kernel


def layer(experts: int, hidden: int, intermediate: int, dtype: torch.dtype, tokens: int = 12, top_k: int = 2,
          seed: int = 0):  # type: ignore[no-untyped-def]
    torch.manual_seed(seed)
    w13 = (torch.randn(experts, 2 * intermediate, hidden) / hidden**0.5).to(dtype)
    w2 = (torch.randn(experts, hidden, intermediate) / intermediate**0.5).to(dtype)
    x = torch.randn(tokens, hidden).to(dtype)
    ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    return w13, w2, x, ids, torch.rand(tokens, top_k)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b).norm() / b.norm())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_mm_pads_to_16_bytes_and_matches(dtype: torch.dtype) -> None:
    from layoutc_generated import torch_grouped_mm as m

    plan = m.plan(num_experts=4, hidden_size=128, intermediate_size=180, tp_size=1, activation="gelu_tanh",
                  dtype=dtype)
    assert plan.intermediate_size_per_partition_padded == (184 if dtype == torch.bfloat16 else 180)
    w13, w2, x, ids, weights = layer(4, 128, 180, dtype)
    out = m.fused_moe(x, *m.prepack(w13, w2, plan), weights, ids, plan)
    assert rel(out, moe_reference(x, w13, w2, weights, ids, 180, "gelu_tanh")) < 2e-2


def test_grouped_mm_needs_the_pad() -> None:
    """Unpadded (180 bf16 = 360 bytes, not a multiple of 16) the real op refuses the stride."""
    w2 = torch.zeros(2, 64, 180, dtype=torch.bfloat16)
    a = torch.zeros(4, 180, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch._grouped_mm(a, w2.transpose(1, 2), offs=torch.tensor([2, 4], dtype=torch.int32))


def dequantize_int4(packed, plan, shapes, group_size):  # type: ignore[no-untyped-def]
    """Float weights the int4 kernel computes with: (q - 8) * scale + zero, from the packed codes."""
    out = []
    for weight, table in zip(packed.data.packed, packed.data.scales_and_zeros, strict=True):
        _n, k = weight.shape[0], weight.shape[1] * 2
        eye = torch.eye(k, dtype=table.dtype)
        dense = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, weight, group_size, table)  # [K, N] = W^T
        out.append(dense.T.float())
    return torch.stack(out)


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_int4pack_pads_the_reduction_dim_to_the_group_size(group_size: int) -> None:
    from layoutc_generated import torch_int4pack_moe as m

    plan = m.plan(num_experts=4, hidden_size=256, intermediate_size=704, tp_size=4, group_size=group_size,
                  activation="silu", dtype="bfloat16")
    assert plan.intermediate_size_per_partition == 176
    assert plan.intermediate_size_per_partition_padded == -(-176 // group_size) * group_size
    w13, w2, x, ids, weights = layer(4, 256, 176, torch.bfloat16)
    packed13, packed2 = m.prepack(w13, w2, plan)
    out = m.fused_moe(x, packed13, packed2, weights, ids, plan)
    # exact to the dequantized weights the kernel sees (padded, then unpadded)
    deq13 = m.unpad_w13(dequantize_int4(packed13, plan, None, group_size).to(torch.bfloat16), plan)
    deq2 = m.unpad_w2(dequantize_int4(packed2, plan, None, group_size).to(torch.bfloat16), plan)
    assert rel(out, moe_reference(x, deq13, deq2, weights, ids, 176)) < 2e-2
    # and close to the float layer up to int4 quantization error
    assert rel(out, moe_reference(x, w13, w2, weights, ids, 176)) < 0.25
    # the pad rows of w13 dequantize to exactly 0: their groups are all-zero (scale 0, zero 0)
    full13 = dequantize_int4(packed13, plan, None, group_size)
    assert not full13[:, 176:plan.intermediate_size_per_partition_padded].any()
    assert not full13[:, plan.intermediate_size_per_partition_padded + 176:].any()


def test_int4pack_pad_code_is_chosen_not_assumed_zero() -> None:
    """A raw code 0 decodes to (0 - 8) * scale + zero; an all-zero group must use scale 0."""
    from layoutc_generated import torch_int4pack_moe as m

    codes, table = m.quantize_int4(torch.zeros(16, 64, dtype=torch.bfloat16), 32)
    assert not table.any()  # scale 0 and zero 0: every code decodes to 0
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 2)
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(torch.randn(3, 64).to(torch.bfloat16), packed, 32, table)
    assert not y.any()
    live = torch.ones(16, 2, 2, dtype=torch.bfloat16).transpose(0, 1).contiguous()  # scale 1, zero 1
    y0 = torch.ops.aten._weight_int4pack_mm_for_cpu(torch.ones(1, 64).to(torch.bfloat16),
                                                     torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                                                         torch.zeros(16, 64, dtype=torch.int32), 2), 32, live)
    assert float(y0.abs().max()) > 100  # (0 - 8) * 1 + 1 = -7 per element: code 0 is not a zero


@pytest.mark.parametrize("dtype, intermediate, padded", [(torch.bfloat16, 180, 192), (torch.float32, 180, 180)])
def test_int8pack_pads_k_to_16_in_bf16(dtype: torch.dtype, intermediate: int, padded: int) -> None:
    from layoutc_generated import torch_int8pack_moe as m

    plan = m.plan(num_experts=4, hidden_size=128, intermediate_size=intermediate, tp_size=1, activation="silu",
                  dtype=dtype)
    assert plan.intermediate_size_per_partition_padded == padded
    w13, w2, x, ids, weights = layer(4, 128, intermediate, dtype)
    packed13, packed2 = m.prepack(w13, w2, plan)
    out = m.fused_moe(x, packed13, packed2, weights, ids, plan)
    deq13 = torch.stack([w.float() * s.float().unsqueeze(1) for w, s in zip(packed13.data.weights, packed13.data.scales, strict=False)])
    deq2 = torch.stack([w.float() * s.float().unsqueeze(1) for w, s in zip(packed2.data.weights, packed2.data.scales, strict=False)])
    expected = moe_reference(x, m.unpad_w13(deq13.to(dtype), plan), m.unpad_w2(deq2.to(dtype), plan), weights,
                             ids, intermediate)
    assert rel(out, expected) < 2e-2


SEGFAULT_PROBE = """
import sys, torch
x = torch.randn(4, {k}).to(torch.bfloat16)
w = torch.randint(-127, 127, (32, {k}), dtype=torch.int8)
torch.ops.aten._weight_int8pack_mm(x, w, torch.ones(32, dtype=torch.bfloat16))
print("returned")
"""

GUARDED = """
import torch
from layoutc_generated import torch_int8pack_moe as m
errors = []
try:
    m.plan(num_experts=2, hidden_size=68, intermediate_size=64, tp_size=1, activation="silu", dtype="bfloat16")
except m.LayoutContractError as exc:
    errors.append(str(exc))
plan = m.plan(num_experts=2, hidden_size=64, intermediate_size=68, tp_size=1, activation="silu", dtype="bfloat16")
assert plan.intermediate_size_per_partition_padded == 80
good13, good2 = m.prepack(torch.randn(2, 136, 64).to(torch.bfloat16), torch.randn(2, 64, 68).to(torch.bfloat16), plan)
# a forged PackedWeight around int8 weights with K = 68: the shape check refuses it before the op
bad = m.PackedWeight("w2", good2.config, m.Int8Weights(tuple(torch.zeros(64, 68, dtype=torch.int8) for _ in range(2)),
                                                      tuple(torch.ones(64, dtype=torch.bfloat16) for _ in range(2))))
x = torch.randn(4, 64).to(torch.bfloat16)
ids = torch.tensor([[0, 1]] * 4)
for args in ((good13, bad), (bad, good2)):
    try:
        m.fused_moe(x, *args, torch.ones(4, 2), ids, plan)
    except m.LayoutContractError as exc:
        errors.append(str(exc))
out = m.fused_moe(x, good13, good2, torch.ones(4, 2), ids, plan)
assert torch.isfinite(out).all()
print(len(errors))
for e in errors:
    print(e)
"""


@pytest.mark.slow
def test_int8pack_segfault_is_unreachable_through_generated_code() -> None:
    """The raw bf16 op crashes the process on K % 16 != 0; the generated glue refuses first."""
    raw = subprocess.run([sys.executable, "-c", SEGFAULT_PROBE.format(k=68)], capture_output=True, text=True,
                         timeout=120)
    # measured: SIGSEGV with 4 rows and K = 68 (AVX-512 steps 16, AVX2 steps 8: 68 fits neither)
    assert raw.returncode < 0 or raw.returncode == 139, (raw.returncode, raw.stdout)
    guarded = subprocess.run([sys.executable, "-c", textwrap.dedent(GUARDED)], capture_output=True, text=True,
                             timeout=120, cwd=ROOT)
    assert guarded.returncode == 0, guarded.stderr
    lines = guarded.stdout.splitlines()
    assert lines[0] == "3", guarded.stdout
    assert "hidden_size must be a multiple of 16" in lines[1]
    assert all("packed_w" in line for line in lines[2:])


@pytest.fixture(scope="module")
def zentorch_module():  # type: ignore[no-untyped-def]
    require_package("zentorch", "pip install zentorch==2.13.0.1")
    from layoutc_generated import zentorch_fused_moe as m

    m.load_kernel()
    return m


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_zentorch_real_op_matches_reference_fp32(zentorch_module, act: str) -> None:  # type: ignore[no-untyped-def]
    m = zentorch_module
    plan = m.plan(num_experts=4, hidden_size=256, intermediate_size=176, tp_size=1, activation=act, dtype="float32")
    assert plan.intermediate_size_per_partition_padded == 176  # zentorch is never padded
    w13, w2, x, ids, weights = layer(4, 256, 176, torch.float32, top_k=2)
    out = m.fused_moe(x, *m.prepack(w13, w2, plan), weights, ids, plan)
    assert rel(out, moe_reference(x, w13, w2, weights, ids, 176, act)) < 2e-2


def test_zentorch_bf16_is_refused_without_avx512_bf16_unless_opted_in(zentorch_module,  # type: ignore[no-untyped-def]
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    m = zentorch_module
    plan = m.plan(num_experts=4, hidden_size=256, intermediate_size=176, tp_size=1, activation="silu",
                  dtype="bfloat16")
    w13, w2, x, ids, weights = layer(4, 256, 176, torch.bfloat16, top_k=2)
    packed = m.prepack(w13, w2, plan)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.delenv("ZENDNNL_MATMUL_ALGO", raising=False)
    with pytest.raises(m.KernelUnavailableError, match="ZENDNNL_MATMUL_ALGO=3"):
        m.fused_moe(x, *packed, weights, ids, plan)
    monkeypatch.setenv("ZENDNNL_MATMUL_ALGO", "3")
    assert m.bf16_is_reliable()


def test_zentorch_needs_two_active_experts(zentorch_module) -> None:  # type: ignore[no-untyped-def]
    m = zentorch_module
    plan = m.plan(num_experts=4, hidden_size=64, intermediate_size=32, tp_size=1, activation="silu", dtype="float32")
    w13, w2, x, _, _ = layer(4, 64, 32, torch.float32, tokens=1)
    with pytest.raises(m.LayoutContractError, match="at least 2 experts"):
        m.fused_moe(x, *m.prepack(w13, w2, plan), torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.int64), plan)
