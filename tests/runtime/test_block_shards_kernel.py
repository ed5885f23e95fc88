"""A block-sharded contract proved, compiled and run on the real vLLM CPU kernel, every rank.

The shipped `vllm_cpu_grouped_gemm` with gpt-oss's MXFP4 shard rule instead of the even
split: `shard intermediate_size over tp_size in blocks of 32`, each rank's logical size
cdiv(I, 32 tp) * 32. At I = 2880 and tp = 8, ranks 0-6 hold 384 rows and rank 7 holds 192;
at tp = 64, ranks 0-44 hold 64 rows and ranks 45-63 none. The oracle is an unsharded float64
loop over experts; the sum of every rank's real-kernel output must match it, the short and
empty ranks' fill rows included (they must add nothing).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from layoutc.cli import main
from tests.conftest import ROOT, require_package
from tests.support.loading import load_generated

SHIPPED = ROOT / "contracts" / "vllm_cpu_grouped_gemm.moe"


def block_sharded_text() -> str:
    text = SHIPPED.read_text().replace("contract vllm_cpu_grouped_gemm", "contract vllm_cpu_block_sharded")
    old_let = "let intermediate_size_per_partition = intermediate_size / tp_size\n"
    assert old_let in text
    text = text.replace(old_let, old_let + "shard intermediate_size over tp_size in blocks of 32\n"
                        "let shard_size = cdiv(intermediate_size, 32 * tp_size) * 32\n")
    text = text.replace("round_up(intermediate_size_per_partition, intermediate_alignment)",
                        "round_up(shard_size, intermediate_alignment)")
    assert text.count("intermediate_size_per_partition ->") == 3
    return text.replace("intermediate_size_per_partition ->", "shard_size ->")


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return compiled_on_the_kernel(tmp_path_factory, "vllm_cpu_block_sharded", block_sharded_text())


def compiled_on_the_kernel(tmp_path_factory: pytest.TempPathFactory, name: str, text: str):  # type: ignore[no-untyped-def]
    """`text` (a contract named `name`) proved and compiled by `layoutc compile` (which verifies
    first) into a fresh folder, imported, with its real kernel loaded."""
    require_package("vllm", "pip install -e '.[kernels]'")
    folder = tmp_path_factory.mktemp(name)
    contract = folder / f"{name}.moe"
    contract.write_text(text)
    out = folder / "out"
    assert main(["compile", str(contract), "--out", str(out), "--no-cache"]) == 0
    m = load_generated(out, name)
    m.load_kernel()
    return m


def _swigluoai(h: torch.Tensor) -> torch.Tensor:
    gate, up = h[0::2].clamp(max=7.0), h[1::2].clamp(-7.0, 7.0)
    return gate * torch.sigmoid(1.702 * gate) * (up + 1)


def _silu(h: torch.Tensor) -> torch.Tensor:
    n = h.shape[0] // 2
    return torch.nn.functional.silu(h[:n]) * h[n:]


def gpt_oss_layer(m, activation: str, tp: int, seed: int, I: int = 2880):  # type: ignore[no-untyped-def]  # noqa: E741
    """A gpt-oss-shaped layer (intermediate size I, 4 experts, H = 64, 6 tokens, top-2) with
    random float32 weights, biases and routing (seeded), and its plan at `tp`: (plan, (w13, w2,
    w13_bias, w2_bias, hidden_states, topk_ids, topk_weights)). w13 is (gate, up) pairs for
    swigluoai, [gate | up] for silu."""
    E, H, T = 4, 64, 6
    torch.manual_seed(seed)
    full13 = torch.randn(E, 2 * I, H) / 8
    full2 = torch.randn(E, H, I) / 16
    bias13, bias2 = torch.randn(E, 2 * I) / 4, torch.randn(E, H) / 4
    x = torch.randn(T, H)
    ids = torch.stack([torch.randperm(E)[:2] for _ in range(T)])
    weights = torch.rand(T, 2)
    constants = dict(swiglu_alpha_milli=1702, swiglu_limit_milli=7000) if activation == "swigluoai" else {}
    plan = m.plan(num_experts=E, hidden_size=H, intermediate_size=I, tp_size=tp, isa="vec", activation=activation,
                  dtype="float32", **constants)
    return plan, (full13, full2, bias13, bias2, x, ids, weights)


@pytest.mark.kernel
@pytest.mark.parametrize("activation, tp", [("swigluoai", 8), ("swigluoai", 64), ("silu", 8), ("silu", 12)])
def test_every_rank_on_the_real_kernel_sums_to_the_reference(module, activation: str, tp: int,  # type: ignore[no-untyped-def]
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    m = module
    I = 2880  # noqa: E741  (the field's names)
    plan, (full13, full2, bias13, bias2, x, ids, weights) = gpt_oss_layer(m, activation, tp, seed=tp)
    L = -(-I // (32 * tp)) * 32
    short = [r for r in range(tp) if (r + 1) * L > I]
    assert short, "the case must have a short or empty rank"
    assert all_ranks_error(m, plan, activation, full13, full2, bias13, bias2, x, ids, weights) < 1e-4


def all_ranks_error(m, plan, activation: str, full13: torch.Tensor, full2: torch.Tensor,  # type: ignore[no-untyped-def]
                    bias13: torch.Tensor, bias2: torch.Tensor, x: torch.Tensor, ids: torch.Tensor,
                    weights: torch.Tensor) -> float:
    """Relative error of the sum of every rank's real-kernel output (shard_*, prepack_padded,
    fused_moe) against an unsharded float64 per-expert loop over the full weights."""
    total = torch.zeros(x.shape[0], full2.shape[1])
    for rank in range(plan.tp_size):
        packed = m.prepack_padded(m.shard_w13(full13, rank, plan), m.shard_w2(full2, rank, plan), plan)
        total += m.fused_moe(x, *packed, weights, ids, plan, w13_bias=m.shard_w13_bias(bias13, rank, plan),
                             w2_bias=m.shard_w2_bias(bias2, rank, plan)).float()
    act = _swigluoai if activation == "swigluoai" else _silu
    expected = torch.zeros(x.shape[0], full2.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            h = full13[e].double() @ x[t].double() + bias13[e].double()
            expected[t] += float(weights[t, k]) * (full2[e].double() @ act(h) + bias2[e].double())
    return float((total.double() - expected).norm() / expected.norm())


def _with_bias_tail_fill(text: str) -> str:
    """The block-sharded variant with `tail fill 1` on w13_bias: a short rank's tail lanes get
    gate and up bias 1 over zero w13 rows and a zero w2 column (inert: the activation is a
    finite constant times 0), while the bias's pad keeps `fill 0`."""
    old = "tensor w13_bias: bias w13 optional {\n  axis experts = local_num_experts\n  axis n = like w13.n\n  storage dtype\n  fill 0\n"
    assert old in text, "the block-sharded variant's w13_bias no longer reads as this edit expects"
    return text.replace(old, old + "  tail fill 1\n").replace("contract vllm_cpu_block_sharded",
                                                              "contract vllm_cpu_block_sharded_tail")


@pytest.fixture(scope="module")
def tail_module(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return compiled_on_the_kernel(tmp_path_factory, "vllm_cpu_block_sharded_tail",
                                  _with_bias_tail_fill(block_sharded_text()))


@pytest.mark.kernel
@pytest.mark.parametrize("activation, tp", [("swigluoai", 8), ("silu", 12)])
def test_a_bias_tail_fill_changes_nothing_on_the_real_kernel(tail_module, activation: str, tp: int) -> None:  # type: ignore[no-untyped-def]
    """The generated shard_w13_bias writes 1 past the last rank's slice (exact tensor; the shard
    size is whole 32-row tiles here, so there is no pad: tests/runtime/test_block_shards.py covers a tail
    beside a pad), and the sum of every rank's real-kernel output still matches the reference."""
    m = tail_module
    I = 2880  # noqa: E741  (the field's names)
    plan, (full13, full2, bias13, bias2, x, ids, weights) = gpt_oss_layer(m, activation, tp, seed=100 + tp)
    L = -(-I // (32 * tp)) * 32
    P = plan.intermediate_size_per_partition_padded
    last = tp - 1
    live = max(0, min(L, I - last * L))
    assert live < L <= P
    got = m.shard_w13_bias(bias13, last, plan)[0]
    if activation == "swigluoai":  # the full bias is (gate, up) pairs: live pairs, tail pairs, pad pairs
        want = torch.cat([bias13[0, 2 * last * L:2 * (last * L + live)], torch.ones(2 * (L - live)),
                          torch.zeros(2 * (P - L))])
    else:  # [gate | up] halves, each: live, tail, pad
        want = torch.cat([bias13[0, last * L:last * L + live], torch.ones(L - live), torch.zeros(P - L),
                          bias13[0, I + last * L:I + last * L + live], torch.ones(L - live), torch.zeros(P - L)])
    assert torch.equal(got, want)
    assert all_ranks_error(m, plan, activation, full13, full2, bias13, bias2, x, ids, weights) < 1e-4


def test_an_even_split_of_the_same_contract_is_refused_where_it_would_drop_rows(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The same variant with a per-rank size that rounds down: a coverage counterexample."""
    text = block_sharded_text().replace("cdiv(intermediate_size, 32 * tp_size) * 32",
                                        "intermediate_size / (32 * tp_size) * 32")
    contract = tmp_path / "dropping.moe"
    contract.write_text(text)
    assert main(["verify", str(contract), "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert "coverage          counterexample" in out and "are never read (dropped)" in out
