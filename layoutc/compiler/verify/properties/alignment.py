"""The `alignment` property: every kernel divisibility rule (`align`) holds on the padded sizes.

One obligation per `align` rule of the kernel clause, over the kernel's sizes (segments
times padded size of each axis; docs/verification.md, alignment).
"""

from __future__ import annotations

from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler import ir
from layoutc.compiler.verify.obligations import Obligation, decide
from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict


def obligations(run: Run) -> list[Obligation]:
    """One obligation per `align` rule: admitted, and the rule false on the kernel's sizes."""
    kernel = run.contract.kernel
    if kernel is None:
        return []
    ks = run.kernel_sizes()
    obs = []
    for rule in kernel.aligns:
        cond = run.enc.expr(rule.cond, ks)
        sizes = [n for n in ir.walk(rule.cond) if isinstance(n, ir.AxisSize)]

        def explain(model, rule=rule, sizes=sizes):  # type: ignore[no-untyped-def]
            shown = ", ".join(f"{s.tensor}.{s.axis} = {run.val(model, ks[(s.tensor, s.axis)])}" for s in sizes)
            return f"kernel rule broken: {rule.message}" + (f" ({shown})" if shown else ""), "kernel"
        obs.append(Obligation(f"align line {rule.span.line}", rule.span, z3.And(run.admitted, z3.Not(cond)),
                              explain, sizes[0].tensor if sizes else None))
    return obs


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `alignment` verdict: every obligation of :func:`obligations` proved, or why not."""
    return decide(run, "alignment", obligations(run), run.contract.span)
