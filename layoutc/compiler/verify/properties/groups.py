"""The `groups` property: groups and packed elements stay whole and never straddle the pad boundary.

A groups axis's logical and padded sizes are whole groups; a packed axis's are whole
storage elements (docs/verification.md, groups).
"""

from __future__ import annotations

from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler.verify.obligations import Obligation, decide
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict
from layoutc.runtime.algebra import Word


def obligations(run: Run) -> list[Obligation]:
    """Per groups axis: whole groups on both sides of the pad boundary; per packed axis:
    whole storage elements."""
    obs: list[Obligation] = []
    for t in run.contract.tensors:
        for axis in t.axes:
            label = f"{t.name}.{axis.name}"
            logical, padded, _segs = run.sizes[(t.name, axis.name)]
            if axis.kind == "groups" and axis.group_size is not None:
                g = run.enc.expr(axis.group_size)

                def by(v: int, value: z3.ArithRef):  # type: ignore[no-untyped-def]
                    return z3.BoolVal(False, run.ctx) if v == -1 else value % v != 0
                straddle = run.enc.by_values(axis.group_size, lambda v, size=logical: by(v, size), None)
                partial = run.enc.by_values(axis.group_size, lambda v, size=padded: by(v, size), None)

                def explain(model, label=label, g=g, logical=logical, padded=padded, axis=axis):  # type: ignore[no-untyped-def]
                    gv, lv, pv = run.val(model, g), run.val(model, logical), run.val(model, padded)
                    if lv % gv:
                        first = lv // gv * gv
                        of = ".".join(axis.group_of) if axis.group_of else "the axis"
                        return (f"{label}: group {lv // gv} covers positions {first}..{first + gv - 1} of {of}, "
                                f"but only {first}..{lv - 1} are live: the group straddles the pad boundary "
                                f"(logical {lv}, group {gv})", label)
                    return f"{label}: padded size {pv} is not a whole number of groups of {gv}", label
                obs.append(Obligation(f"{label} groups", axis.span,
                                      z3.And(run.admitted, z3.Or(straddle, partial)), explain, t.name))
            if axis.pack > 1:
                f = axis.pack
                # concat and interleave pack across segments: the whole axis is one run
                whole = 2 if axis.layout in (Word.CONCAT, Word.INTERLEAVE) else 1
                whole_l, whole_p = logical * whole, padded * whole

                def pexplain(model, label=label, f=f, whole_l=whole_l, whole_p=whole_p):  # type: ignore[no-untyped-def]
                    return (f"{label}: {run.val(model, whole_l)} -> {run.val(model, whole_p)} values do not fill whole "
                            f"storage elements of {f}: a packed element would mix data and pad", label)
                packing = z3.Or(whole_l % f != 0, whole_p % f != 0)
                obs.append(Obligation(f"{label} packing", axis.span, z3.And(run.admitted, packing),
                                      pexplain, t.name))
    return obs


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `groups` verdict: every obligation of :func:`obligations` proved, or why not."""
    return decide(run, "groups", obligations(run), run.contract.span)
