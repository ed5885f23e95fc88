"""Block shards in the runtime (`shard ... in blocks of B`): uneven and empty ranks.

Rank r reads [min(r * L, F), min((r + 1) * L, F)) of each segment of the full axis. The
oracle here is the definition itself, applied to index-valued tensors: over all ranks every
full entry appears exactly once, in order, at the front of its segment's run, and every other
position of the rank's padded tensor holds the fill. `shard` and the loader (`allocate` +
`load`, the engine-style path) must give the same tensor for every rank.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from layoutc.runtime import layout, loading
from layoutc.runtime.errors import LayoutContractError

FILL = -1.0


def _axes(name: str, logical: int, padded: int, full: int) -> tuple[layout.Axis, ...]:
    segments = 1 if name == "pad" else 2
    return (layout.Axis("experts", "none", 1, 2, 2, False),
            layout.Axis("n", name, segments, logical, padded, True, full=full),
            layout.Axis("k", "none", 1, 3, 3, False))


def _positions(name: str, logical: int, padded: int, segments: int, j: int, i: int) -> int:
    """Where entry i of segment j of a rank's slice goes in the padded axis (the layouts'
    definitions, written out independently of the runtime)."""
    if name == "interleave":
        return segments * i + j
    if name == "concat":
        return j * logical + i
    return j * padded + i


CASES = [  # (layout, F, tp, B, padded): the gpt-oss shape scaled down, empty ranks, even splits
    *[(name, f, tp, b, p) for name in ("halves", "concat", "interleave", "pad")
      for f, tp, b, p in ((90, 8, 2, 14), (96, 8, 8, 16), (12, 3, 4, 4), (20, 6, 4, 8), (16, 4, 4, 4))],
]


@pytest.mark.parametrize("name, F, tp, B, P", CASES)
def test_every_full_entry_lands_on_exactly_one_rank(name: str, F: int, tp: int, B: int, P: int) -> None:
    L = -(-F // (B * tp)) * B
    assert P >= L
    axes = _axes(name, L, P, F)
    segments = axes[1].segments
    # segment j's entry q has the id j * F + q + 1: `halves` holds them segment after
    # segment, `pairs` as (gate, up) pairs; the full tensor of an interleaved axis is pairs
    halves = (torch.arange(segments * F, dtype=torch.float32) + 1).view(1, segments * F, 1).expand(2, -1, 3)
    halves = halves.contiguous()
    pairs = torch.stack([halves[:, :F], halves[:, F:]], 2).reshape(2, 2 * F, 3).contiguous() \
        if segments == 2 else halves
    full = pairs if name == "interleave" else halves
    seen: list[float] = []
    for rank in range(tp):
        out = layout.shard("c", "w13", full, rank, tp, axes, torch.float32, FILL, None)
        assert out.shape == (2, segments * P, 3)
        start, live = min(rank * L, F), min(L, F - min(rank * L, F))
        expected = torch.full((segments * P,), FILL)
        for j, i in itertools.product(range(segments), range(live)):
            expected[_positions(name, L, P, segments, j, i)] = j * F + start + i + 1
        assert torch.equal(out[0, :, 0], expected), (rank, out[0, :, 0].tolist())
        assert torch.equal(out[1], out[0]) and torch.equal(out[..., 2], out[..., 0])
        seen += [v for v in out[0, :, 0].tolist() if v != FILL]
        # the engine-style loader gives the same rank tensor, from either source row layout
        sources = [("halves", halves)] + ([("interleave", pairs)] if segments == 2 else [])
        for source_layout, src in sources:
            dst = loading.allocate("c", "w13", axes, torch.float32, FILL, rank, tp)
            loading.load("c", "w13", dst, src, axes, torch.float32, rank, tp,
                         roles=("gate", "up") if segments > 1 else (), source_layout=source_layout)
            assert torch.equal(dst, out), (name, source_layout, rank)
    assert sorted(seen) == [float(v) for v in range(1, segments * F + 1)]


def test_full_shape_is_the_declared_length() -> None:
    axes = _axes("halves", 384, 512, 2880)
    assert layout.full_shape(axes, 8) == (2, 5760, 3)
    assert [layout.extent(axes[1], r, 8) for r in (0, 6, 7)] == [(0, 384), (2304, 384), (2688, 192)]
    with pytest.raises(LayoutContractError, match=r"full w13 has shape \(2, 6144, 3\), expected \(2, 5760, 3\)"):
        layout.shard("c", "w13", torch.zeros(2, 6144, 3), 1, 8, axes, torch.float32, 0.0, None)


def test_an_empty_rank_reads_nothing_and_holds_only_the_fill() -> None:
    axes = _axes("halves", 64, 256, 2880)  # tp 64: ranks 45..63 are empty
    assert layout.extent(axes[1], 45, 64) == (2880, 0)
    full = torch.ones(2, 5760, 3)
    out = layout.shard("c", "w13", full, 63, 64, axes, torch.float32, 0.0, None)
    assert not out.any()
    dst = loading.allocate("c", "w13", axes, torch.float32, 0.0, 63, 64)
    loading.load("c", "w13", dst, full, axes, torch.float32, 63, 64, roles=("gate", "up"))
    assert not dst.any()


def test_explain_shows_each_ranks_slice(in_root, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from layoutc.cli import main

    args = ["explain", "contracts/aiter_fused_moe.moe", "--set", "num_experts=128", "--set", "hidden_size=2880",
            "--set", "intermediate_size=2880", "--set", "activation=swigluoai"]
    assert main([*args, "--set", "tp_size=8"]) == 0
    out = capsys.readouterr().out
    assert "shard: 2880 intermediate entries over tp_size=8 ranks in blocks of 32, 384 per rank" in out
    assert "  ranks 0-6: 384 each, [0, 384) .. [2304, 2688)\n  rank 7: 192, [2688, 2880)\n" in out
    assert main([*args, "--set", "tp_size=64"]) == 0
    assert "  ranks 45-63: none (empty)\n" in capsys.readouterr().out


# ---- `tail fill`: the value past a short rank's slice, the fill in the pad ----------------------

TAIL = -2.0


def _kinds(name: str, logical: int, padded: int, segments: int, live: int) -> list[str]:
    """What each position of a rank's padded axis holds: "live", "tail" (inside the logical run,
    past the rank's slice) or "pad" (past the logical run), from the layouts' definitions."""
    kinds = ["pad"] * (segments * padded)
    for j, i in itertools.product(range(segments), range(logical)):
        kinds[_positions(name, logical, padded, segments, j, i)] = "live" if i < live else "tail"
    return kinds


@pytest.mark.parametrize("name, F, tp, B, P", CASES)
def test_the_tail_holds_the_tail_fill_and_the_pad_the_fill(name: str, F: int, tp: int, B: int, P: int) -> None:
    """Past a short rank's slice: TAIL; in the pad on either axis (n's pad, or k's pad columns
    3..4, which engines add after loading): FILL; live entries once, in order. `shard` and the
    loader agree, and `fill_runs` writes every non-live position exactly once."""
    L = -(-F // (B * tp)) * B
    segments = 1 if name == "pad" else 2
    axes = (layout.Axis("experts", "none", 1, 2, 2, False),
            layout.Axis("n", name, segments, L, P, True, full=F),
            layout.Axis("k", "pad", 1, 3, 5, False))
    halves = (torch.arange(segments * F, dtype=torch.float32) + 1).view(1, segments * F, 1).expand(2, -1, 3)
    halves = halves.contiguous()
    pairs = torch.stack([halves[:, :F], halves[:, F:]], 2).reshape(2, 2 * F, 3).contiguous() \
        if segments == 2 else halves
    full = pairs if name == "interleave" else halves
    for rank in range(tp):
        start, live = min(rank * L, F), min(L, F - min(rank * L, F))
        kinds = _kinds(name, L, P, segments, live)
        expected = torch.empty(segments * P, 5)
        for pos, kind in enumerate(kinds):
            expected[pos] = {"live": 0.0, "tail": TAIL, "pad": FILL}[kind]
        for j, i in itertools.product(range(segments), range(live)):
            expected[_positions(name, L, P, segments, j, i), :3] = j * F + start + i + 1
        expected[:, 3:] = FILL  # k's pad: the fill, even on a tail row
        out = layout.shard("c", "w13", full, rank, tp, axes, torch.float32, FILL, None, tail_fill=TAIL)
        assert torch.equal(out[0], expected) and torch.equal(out[1], expected), (name, rank)
        dst = loading.allocate("c", "w13", axes, torch.float32, FILL, rank, tp, tail_fill=TAIL)
        loading.load("c", "w13", dst, full, axes, torch.float32, rank, tp, roles=("gate", "up") if segments > 1 else (),
                     source_layout="interleave" if name == "interleave" else "halves")
        assert torch.equal(dst, out), (name, rank)
        # exactly once: count the writes fill_runs makes, position by position
        counts = torch.zeros(2, segments * P, 5)
        plan = [layout.rank_runs(a, rank, tp) for a in axes]
        orig = layout.write_code
        try:
            layout.write_code = lambda piece, value: piece.add_(1)  # type: ignore[assignment]
            layout.fill_runs(counts, plan, FILL, TAIL)
        finally:
            layout.write_code = orig  # type: ignore[assignment]
        live_mask = torch.tensor([k == "live" for k in kinds]).view(1, -1, 1).expand(2, -1, 5).clone()
        live_mask[..., 3:] = False
        assert torch.equal(counts, (~live_mask).float()), (name, rank)


def test_a_tail_fill_with_an_uninitialised_pad_writes_only_the_tail() -> None:
    """`fill uninit` with a `tail fill`: the pad is left as allocated, the tail is written."""
    axes = _axes("halves", 8, 12, 12)  # tp 2: rank 1 holds 4 of 8 rows per half
    out = torch.full((2, 24, 3), 7.0)
    layout.shard("c", "w13", torch.ones(2, 24, 3), 1, 2, axes, torch.float32, None, out, tail_fill=TAIL)
    row = out[0, :, 0].tolist()
    assert row == [1.0] * 4 + [TAIL] * 4 + [7.0] * 4 + [1.0] * 4 + [TAIL] * 4 + [7.0] * 4


@pytest.fixture(scope="module")
def marlin(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """contracts/marlin_moe_fp8.moe compiled (verified first) into a temporary folder."""
    import os

    from layoutc.cli import main
    from tests.conftest import ROOT
    from tests.support.loading import load_generated

    out = tmp_path_factory.mktemp("marlin_tail")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        assert main(["compile", "contracts/marlin_moe_fp8.moe", "--out", str(out)]) == 0
    finally:
        os.chdir(cwd)
    return load_generated(out, "marlin_moe_fp8")


def _block_fp8(module, H: int, I: int, tp: int):  # type: ignore[no-untyped-def]  # noqa: E741
    return module.plan(num_experts=2, hidden_size=H, intermediate_size=I, tp_size=tp, scheme="fp8_block128",
                       scale_dtype="float32", activation="silu")


def test_generated_marlin_fp8_scales_hold_unit_scales_past_a_short_ranks_slice(marlin) -> None:  # type: ignore[no-untyped-def]
    """contracts/marlin_moe_fp8.moe declares `tail fill 1` on its scales (vLLM's grouped loader
    writes unit scales there) and keeps `fill 0` for weights. Block FP8 at H = 256, I = 640,
    tp = 4: I_pp = round_up(160, 128) = 256, two 128-blocks per rank of the 5 in I: rank 2
    holds block 4 and one tail block, rank 3 two tail blocks. Exact tensors, every rank, from
    shard_* and from alloc_* + load_*."""
    m = marlin
    H, I, tp = 256, 640, 4  # noqa: E741  (the field's names)
    plan = _block_fp8(m, H, I, tp)
    assert plan.intermediate_size_per_partition == plan.intermediate_size_per_partition_padded == 256
    # w2 scales [E, H/128, I/128] and w13 scales [E, 2 I/128, H/128], values = 10 * block + 1 (+ 100 for up)
    s2 = (torch.arange(5, dtype=torch.float32) * 10 + 1).view(1, 1, 5).expand(2, 2, 5).contiguous()
    s13 = torch.cat([torch.arange(5) * 10 + 1, torch.arange(5) * 10 + 101]).float().view(1, 10, 1)
    s13 = s13.expand(2, 10, 2).contiguous()
    want2 = {0: [1, 11], 1: [21, 31], 2: [41, 1], 3: [1, 1]}  # w2 k: 2 blocks per rank, tail = 1.0
    want13 = {0: [1, 11, 101, 111], 1: [21, 31, 121, 131], 2: [41, 1, 141, 1], 3: [1, 1, 1, 1]}
    for rank in range(tp):
        e2 = torch.tensor(want2[rank], dtype=torch.float32).view(1, 1, 2).expand(2, 2, 2)
        e13 = torch.tensor(want13[rank], dtype=torch.float32).view(1, 4, 1).expand(2, 4, 2)
        assert torch.equal(m.shard_w2_weight_scale(s2, rank, plan), e2), rank
        assert torch.equal(m.shard_w13_weight_scale(s13, rank, plan), e13), rank
        dst2 = m.alloc_w2_weight_scale(plan, rank)
        m.load_w2_weight_scale(dst2, s2, plan, rank)
        dst13 = m.alloc_w13_weight_scale(plan, rank)
        m.load_w13_weight_scale(dst13, s13, plan, rank)
        assert torch.equal(dst2, e2) and torch.equal(dst13, e13), rank
    # the weights keep `fill 0` past the slice: rank 3's w2 shard is all zero bytes
    w2 = torch.ones(2, H, I).to(torch.float8_e4m3fn)
    assert not m.shard_w2_weight(w2, 3, plan).view(torch.uint8).any()
    assert m.shard_w2_weight(w2, 2, plan).float()[0, 0].tolist() == [1.0] * 128 + [0.0] * 128


def test_tail_fill_decoded_resolves_like_fill_decoded_and_a_finite_scale_tail_proves(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`tail fill decoded 1` on an E8M0 scale resolves to the byte 127 (2^0) and the contract
    still proves every property; `tail fill 255` (NaN) is the unsound case
    block_shard_scale_tail_nan."""
    from layoutc.compiler.source import load
    from layoutc.compiler.verify.prove import verify
    from tests.conftest import ROOT

    text = (ROOT / "tests" / "cases" / "unsound" / "block_shard_scale_tail_nan.moe").read_text()
    assert "  tail fill 255\n" in text
    path = tmp_path / "scale_tail_one.moe"
    path.write_text(text.replace("  tail fill 255\n", "  code 0..254\n  tail fill decoded 1\n"))
    contract, diags, _ = load(str(path))
    assert contract is not None, diags
    scale = contract.tensor("w2_weight_scale")
    assert (scale.fill, scale.tail_fill_kind, scale.tail_fill, scale.tail_code) == (0, "decoded", 127, 127)
    assert scale.at_tail().fill == 127 and scale.at_tail().tail_fill is None
    bad = [(v.property, v.detail) for v in verify(contract) if v.status not in ("proved", "info")]
    assert not bad, bad
