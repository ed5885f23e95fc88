"""Closed forms the verifier uses instead of an index formula are equivalent to it."""

from __future__ import annotations

import itertools

import z3

from layoutc.verify import _injective_broken


def test_roundtrip_closed_form_matches_the_index_formula() -> None:
    """For every layout, "a logical position is stored outside the axis or two share one"
    holds exactly when L > 0 and L > P (per segment, in groups for a groups axis)."""
    ctx = z3.Context()
    i1, i2 = z3.Int("i1", ctx), z3.Int("i2", ctx)
    layouts = [("pad", 1, 1), ("halves", 2, 2), ("concat", 2, 2), ("interleave", 2, 2)]
    for (layout, roles, segs), lg, pg in itertools.product(layouts, range(-3, 7), range(-3, 7)):
        s = z3.Solver(ctx=ctx)
        s.add(_injective_broken(layout, roles, z3.IntVal(lg, ctx), z3.IntVal(pg, ctx), segs, i1, i2))
        assert (s.check() == z3.sat) == (lg > 0 and lg > pg), (layout, lg, pg)
