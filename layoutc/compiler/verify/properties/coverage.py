"""The `coverage` property: over all ranks, every element of the full checkpoint is read by exactly one rank."""

from __future__ import annotations

from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler.verify.obligations import Obligation, decide
from layoutc.compiler.verify.properties.shards import sharded_axes, split_here
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict


def obligations(run: Run) -> list[Obligation]:
    """Rank r of tp_size reads [min(r * L, FULL), min((r + 1) * L, FULL)) of each segment (a
    block of pairs for interleave): the slices are disjoint and ordered, so every element of
    the full axis is read exactly once iff tp_size * L >= FULL. An even shard (no `blocks`)
    must have no short rank either: tp_size * L == FULL. A block shard (`in blocks of B`)
    must start every rank on a block boundary (L % B == 0), and the last rank's slice,
    FULL - r * L, must be whole groups and whole packed elements (FULL % G == 0,
    FULL % pack == 0) (docs/verification.md, coverage). Tensors without a sharded axis are
    read whole by every rank, or (a w2 bias) by rank 0 only."""
    shard = run.contract.shard
    if shard is None:
        return []
    full = run.enc.expr(shard.full)
    tp = run.enc.vars[shard.count]
    obs: list[Obligation] = []
    for t, a in sharded_axes(run.contract):
        logical, _, _ = run.sizes[(t.name, a.name)]
        label = f"{t.name}.{a.name}"
        source = "the default `shard intermediate_size over tp_size`" if shard.implicit else "the `shard` clause"
        if shard.blocks is None:
            wrong = tp * logical != full
        else:
            # rank 1 starts at L: misaligned only where rank 1 exists and holds data
            misaligned = z3.And(tp >= 2, logical < full,
                                run.enc.by_values(shard.blocks, lambda v, n=logical: n % v != 0, None))
            ragged: list[z3.BoolRef] = []
            if a.kind == "groups" and a.group_size is not None:
                ragged.append(run.enc.by_values(
                    a.group_size, lambda v: z3.BoolVal(False, run.ctx) if v == -1 else full % v != 0, None))
            if a.pack > 1:
                ragged.append(full % a.pack != 0)
            wrong = z3.Or(tp * logical < full, misaligned, *ragged)
        wrong = z3.And(split_here(run, t, a), wrong)

        def explain(model, label=label, logical=logical, source=source, a=a):  # type: ignore[no-untyped-def]
            lv, tv, fv = run.val(model, logical), run.val(model, tp), run.val(model, full)
            head = f"{label}: {tv} ranks each read {lv} of the full {fv} ({source})"
            if tv * lv < fv:
                return f"{head}: entries {tv * lv}..{fv - 1} are never read (dropped)", label
            if shard.blocks is None:
                return f"{head}: ranks read up to entry {tv * lv - 1}, past the checkpoint's {fv}", label
            bv = run.val(model, run.enc.expr(shard.blocks))
            if lv % bv and tv >= 2 and lv < fv:
                return (f"{head}: rank 1 starts at entry {lv}, inside block {lv // bv} of {bv} entries "
                        "(a block shard gives each rank whole blocks)"), label
            unit = run.val(model, run.enc.expr(a.group_size)) if a.kind == "groups" and a.group_size is not None \
                else a.pack
            last = next(r for r in range(tv) if (r + 1) * lv >= fv)
            return (f"{head}: the last rank with data (rank {last}) reads entries {last * lv}..{fv - 1}, "
                    f"{fv - last * lv} entries, not a whole number of {unit}-entry "
                    f"{'groups' if a.kind == 'groups' else 'packed elements'}"), label
        obs.append(Obligation(f"{label} coverage", a.span, z3.And(run.admitted, wrong), explain, t.name))
    return obs


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `coverage` verdict: every obligation of :func:`obligations` proved, or why not."""
    return decide(run, "coverage", obligations(run), run.contract.span)
