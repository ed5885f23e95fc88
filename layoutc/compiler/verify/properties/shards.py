"""Which axes a `shard` clause splits over ranks, and where a rank is short.

Shared by the coverage, inertness and waste properties.
"""

from __future__ import annotations

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.compiler.verify.run import Run


def sharded_axes(contract: ir.Contract) -> list[tuple[ir.Tensor, ir.Axis]]:
    """The axes `shard_*` splits over ranks: the intermediate axis of every tensor (w13.n, w2.k
    and the biases, scales and zero-points tied to them), except a groups axis of one group
    (group size -1), which every rank holds whole. The same rule as the emitter's axis tables."""
    if contract.shard is None:
        return []
    return [(t, a) for t in contract.tensors for a in t.axes if ir.is_split(t, a)]


def split_here(run: Run, t: ir.Tensor, axis: ir.Axis) -> z3.BoolRef:
    """Whether `shard_*` splits `t`'s `axis` over ranks (a groups axis whose group size may be
    -1 is split only where it is not one group)."""
    if (t, axis) not in sharded_axes(run.contract):
        return z3.BoolVal(False, run.ctx)
    if axis.group_size is not None and not isinstance(axis.group_size, ir.Const):
        return z3.Not(run.enc.by_values(axis.group_size, lambda v: z3.BoolVal(v == -1, run.ctx), None))
    return z3.BoolVal(True, run.ctx)


def short_ranks(run: Run) -> z3.BoolRef:
    """Whether some rank's slice is shorter than the per-rank logical size L (a block shard
    with tp_size * L > FULL): that rank holds the tensors' fill past its slice."""
    shard = run.contract.block_shard
    if shard is None:
        return z3.BoolVal(False, run.ctx)
    w13 = run.contract.weight("w13")
    logical, _, _ = run.sizes[(w13.name, "n")]
    return run.enc.vars[shard.count] * logical > run.enc.expr(shard.full)
