"""The `admission` property: no admitted configuration breaks a kernel rule or a layout assumption.

It follows from the verdicts of alignment, groups, kernel-arguments, placement and
coverage; it also reports a gate (`admit`) that never rejects anything.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import z3  # type: ignore[import-untyped]

from layoutc.compiler.verify.run import Run
from layoutc.compiler.verify.verdicts import Verdict


def check(run: Run, earlier: Mapping[str, Verdict]) -> Verdict:
    """The `admission` verdict from the `earlier` verdicts of the properties the gates must
    protect, with a warning per gate the domains and requires already imply."""
    start = time.perf_counter()
    q0 = run.queries
    for prop in ("alignment", "groups", "kernel-arguments", "placement", "coverage"):
        v = earlier[prop]
        if v.status == "counterexample":
            return Verdict("admission", "counterexample",
                           f"the gates admit a configuration that breaks {prop}: {v.detail}",
                           time.perf_counter() - start, 0, v.span, v.counterexample)
        if v.status == "inconclusive":
            return Verdict("admission", "inconclusive", f"{prop} is inconclusive", 0.0, 0, v.span)
    # A gate is reported only when removing it provably changes nothing, even together with
    # every other gate reported: it is implied by the domains and the requires alone. A gate
    # that rejects something may protect a fact outside the model (a checkpoint layout, the
    # runtime, coverage), so "stricter than needed" is never claimed.
    warnings: list[str] = []
    for rule, formula in run.admits:
        status, _ = run.solve(z3.And(run.base, *run.requires, z3.Not(formula)), quick_only=True)
        if status == "unsat":
            warnings.append(f"line {rule.span.line}: the gate \"{rule.message}\" never rejects anything: the "
                            "parameter domains and the requires already imply it")
    return Verdict("admission", "proved", "every admitted configuration meets the kernel's rules",
                   time.perf_counter() - start, run.queries - q0, run.contract.span, None, tuple(warnings))
