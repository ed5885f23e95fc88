"""The `roundtrip` property: pad is injective into the padded tensor and unpad inverts it.

Sizes are non-negative and padding never shrinks; for a padded axis the index form of
injectivity (:func:`injective_broken`) reduces to L > 0 and L > P, which is what is asked
(tests/compiler/test_verify_encoding.py checks the two agree; docs/verification.md, roundtrip).
"""

from __future__ import annotations

from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler.verify.layout_words import layout_phys
from layoutc.compiler.verify.obligations import Obligation, decide
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict
from layoutc.runtime.algebra import Word


def obligations(run: Run) -> list[Obligation]:
    """Per axis: sizes non-negative and never shrunk by padding; per padded axis: injective."""
    obs: list[Obligation] = []
    for t in run.contract.tensors:
        for axis in t.axes:
            logical, padded, _segs = run.sizes[(t.name, axis.name)]
            label = f"{t.name}.{axis.name}"

            def sizes(model, label=label, logical=logical, padded=padded):  # type: ignore[no-untyped-def]
                return (f"{label}: logical size {run.val(model, logical)} and padded size "
                        f"{run.val(model, padded)}: sizes must be >= 0 and padding never shrinks", label)
            obs.append(Obligation(f"{label} sizes", axis.span,
                                  z3.And(run.admitted, z3.Or(logical < 0, padded < logical)), sizes, t.name))
            if not axis.is_padded:
                continue
            lg, pg = run.grouped(axis, logical), run.grouped(axis, padded)
            # "some logical position lies outside the padded axis, or two share one" reduces,
            # for every layout's phys(), to L > 0 and L > P (tests/compiler/test_verify_encoding.py
            # checks the index formula below, `injective_broken`, against it).
            broken = z3.And(lg > 0, lg > pg)
            def explain(model, label=label, lg=lg, pg=pg):  # type: ignore[no-untyped-def]
                return (f"{label}: {run.val(model, lg)} logical positions per segment do not fit "
                        f"injectively into {run.val(model, pg)} padded ones; unpad cannot invert pad", label)
            obs.append(Obligation(f"{label} injective", axis.span, z3.And(run.admitted, broken),
                                  explain, t.name))
    return obs


def injective_broken(layout: Word, roles: int, lg: z3.ArithRef, pg: z3.ArithRef, segs: int,
                      i1: z3.ArithRef, i2: z3.ArithRef) -> z3.BoolRef:
    """The index form of a roundtrip violation: a logical (role, i) stored outside the padded
    axis, or two distinct ones stored at one position (pad's phys() per layout)."""
    ctx = i1.ctx
    cases = []
    for k1 in range(roles):
        j1 = layout_phys(layout, k1, i1, lg, pg)
        cases.append(z3.And(i1 >= 0, i1 < lg, z3.Or(j1 < 0, j1 >= segs * pg)))
        for k2 in range(roles):
            j2 = layout_phys(layout, k2, i2, lg, pg)
            same = i1 == i2 if k1 == k2 else z3.BoolVal(False, ctx)
            cases.append(z3.And(i1 >= 0, i1 < lg, i2 >= 0, i2 < lg, j1 == j2, z3.Not(same)))
    return z3.Or(cases)


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `roundtrip` verdict: every obligation of :func:`obligations` proved, or why not."""
    return decide(run, "roundtrip", obligations(run), run.contract.span)
