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
